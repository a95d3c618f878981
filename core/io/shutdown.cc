#include "core/io/shutdown.h"

#include <csignal>

namespace konn::core::io {

void ignore_broken_pipe_signal() { std::signal(SIGPIPE, SIG_IGN); }

ShutdownSignals::ShutdownSignals(asio::io_context& ctx, std::function<void(int)> on_first,
                                 std::function<void(int)> on_second)
    : signals_(ctx, SIGINT, SIGTERM),
      on_first_(std::move(on_first)),
      on_second_(std::move(on_second)) {
  wait();
}

void ShutdownSignals::wait() {
  signals_.async_wait([this](const std::error_code& ec, int sig) {
    if (ec) return;  // cancelled: the owner is going away
    if (++received_ == 1) {
      on_first_(sig);
    } else {
      on_second_(sig);
    }
    wait();
  });
}

}  // namespace konn::core::io
