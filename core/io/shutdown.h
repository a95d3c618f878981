#pragma once

#include <functional>

#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>

namespace konn::core::io {

// A peer that resets a connection is an error to handle, not a reason to die: ignores SIGPIPE
// for the whole process. Asio's sends pass MSG_NOSIGNAL already, but splice(2) into a socket
// whose peer has reset raises SIGPIPE (socks5's relay), as does a write into a pipe nobody
// reads. Call it at the top of main(). A child process gets the default disposition back
// (posix_spawnattr_setsigdefault), since an ignored signal stays ignored across exec.
void ignore_broken_pipe_signal();

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
