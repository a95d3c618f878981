#include "core/error/errc.h"

namespace konn {
namespace {

class Category : public std::error_category {
 public:
  const char* name() const noexcept override { return "konn"; }
  std::string message(int v) const override {
    switch (static_cast<Errc>(v)) {
      case Errc::Ok:
        return "ok";
      case Errc::NoAgentAvailable:
        return "No agent available";
      case Errc::DialTimeout:
        return "dial timeout";
      case Errc::DialFailed:
        return "dial failed";
      case Errc::AgentDisconnected:
        return "agent disconnected";
      case Errc::QueueOverflow:
        return "tunnel queue over its cap";
      case Errc::ProtocolViolation:
        return "protocol violation";
      case Errc::InvalidArgument:
        return "invalid argument";
      case Errc::Closed:
        return "closed";
      case Errc::Timeout:
        return "timeout";
      case Errc::DestinationNotAllowed:
        return "destination not allowed";
    }
    return "unknown konn error";
  }
};

}  // namespace

const std::error_category& konn_category() noexcept {
  static const Category category;
  return category;
}

std::error_code make_error_code(Errc e) noexcept { return {static_cast<int>(e), konn_category()}; }

}  // namespace konn
