#pragma once

#include <functional>

#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>

namespace konn::core::io {

// Watches SIGINT and SIGTERM on `ctx`. The first signal calls `on_first` (begin a graceful
// shutdown); a second one calls `on_second` (give up and exit now), as upstream does.
class ShutdownSignals {
 public:
  ShutdownSignals(asio::io_context& ctx, std::function<void(int)> on_first,
                  std::function<void(int)> on_second);

 private:
  void wait();

  asio::signal_set signals_;
  std::function<void(int)> on_first_;
  std::function<void(int)> on_second_;
  int received_ = 0;
};

}  // namespace konn::core::io
