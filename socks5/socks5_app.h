#pragma once

#include <memory>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include "core/io/worker_pool.h"
#include "core/net/resolver.h"
#include "socks5/session.h"
#include "socks5/socks5_options.h"
#include "socks5/user_db.h"

namespace konn::socks5 {

// The daemon: a listener on the main thread's io_context, sessions spread over a WorkerPool
// (one io_context per thread, one c-ares Resolver each), SIGTERM handling.
class Socks5App {
 public:
  // Opens the listener and loads the users file; throws std::runtime_error on startup errors.
  explicit Socks5App(const Socks5Options& options);
  ~Socks5App();

  // Accepts until SIGTERM/SIGINT (or stop()), then drains: stops accepting, lets sessions finish
  // for --graceful-shutdown-timeout, closes the rest. Returns the process exit code.
  int run();
  // Thread-safe: begins the graceful shutdown, as SIGTERM does.
  void stop();

  asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }
  size_t active_sessions() const { return registry_.active(); }

 private:
  core::io::Awaitable<void> accept_loop();
  void begin_shutdown();
  void poll_drain();
  core::net::Resolver& resolver_for(const asio::any_io_executor& ex);

  const Socks5Options& options_;
  std::unique_ptr<UserDb> users_;
  SessionRegistry registry_;
  asio::io_context main_;
  asio::ip::tcp::acceptor acceptor_;
  core::io::WorkerPool pool_;  // after everything sessions use: destroyed before it
  std::vector<std::pair<asio::io_context*, std::unique_ptr<core::net::Resolver>>> resolvers_;
  asio::steady_timer drain_timer_;
  std::chrono::steady_clock::time_point drain_deadline_{};
  bool shutting_down_ = false;
  bool forced_ = false;
};

}  // namespace konn::socks5
