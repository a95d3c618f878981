#include "core/konnectivity/dial_error.h"

#include <algorithm>
#include <cctype>

namespace konn::core::konnectivity {
namespace {

bool contains(std::string_view text, std::string_view needle) {
  auto it = std::search(text.begin(), text.end(), needle.begin(), needle.end(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  });
  return it != text.end();
}

}  // namespace

const char* to_string(DialFailure f) {
  switch (f) {
    case DialFailure::None:
      return "none";
    case DialFailure::Refused:
      return "refused";
    case DialFailure::NetUnreachable:
      return "net_unreachable";
    case DialFailure::HostUnreachable:
      return "host_unreachable";
    case DialFailure::Timeout:
      return "timeout";
    case DialFailure::NoAgent:
      return "no_agent";
    case DialFailure::ProxyUnavailable:
      return "proxy_unavailable";
    case DialFailure::Other:
      return "other";
  }
  return "other";
}

DialFailure classify(std::string_view text) {
  // Order matters: "No agent available" first (it says nothing about the destination), then the
  // timeout words the proxy-server itself matches on.
  if (contains(text, "no agent available")) return DialFailure::NoAgent;
  if (contains(text, "timeout") || contains(text, "timed out") ||
      contains(text, "deadline exceeded")) {
    return DialFailure::Timeout;
  }
  if (contains(text, "connection refused") || contains(text, "connection reset")) {
    return DialFailure::Refused;
  }
  if (contains(text, "network is unreachable") || contains(text, "network is down")) {
    return DialFailure::NetUnreachable;
  }
  if (contains(text, "no route to host") || contains(text, "host is unreachable") ||
      contains(text, "host is down") || contains(text, "no such host") ||
      contains(text, "name or service not known")) {
    return DialFailure::HostUnreachable;
  }
  return DialFailure::Other;
}

int http_status_for(const DialError& e) {
  if (e.http_status == 502 || e.http_status == 503 || e.http_status == 504) return e.http_status;
  switch (e.failure) {
    case DialFailure::NoAgent:
      return 503;
    case DialFailure::Timeout:
      return 504;
    default:
      return 502;
  }
}

}  // namespace konn::core::konnectivity
