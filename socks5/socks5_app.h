#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/thread_pool.hpp>

#include "core/admin/admin_server.h"
#include "core/admin/certificate_gauges.h"
#include "core/io/worker_pool.h"
#include "core/konnectivity/dialer.h"
#include "core/net/resolver.h"
#include "socks5/session.h"
#include "socks5/socks5_metrics.h"
#include "socks5/socks5_options.h"
#include "socks5/socks5_status.h"
#include "socks5/user_db.h"

namespace konn::socks5 {

// The daemon: one listening socket per worker thread (SO_REUSEPORT on one port, so the kernel
// spreads connections and a session never changes thread), a WorkerPool (one io_context per
// thread, one c-ares Resolver each), and the main thread for signals and the shutdown drain.
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

  asio::ip::tcp::endpoint local_endpoint() const { return endpoint_; }
  // The health listener's port (0 when off or not started yet).
  uint16_t health_port() const { return health_ ? health_->port() : 0; }
  size_t active_sessions() const { return registry_.active(); }
  // What /metrics serves (in-process tests read it here).
  Socks5Metrics& metrics() { return metrics_; }

 private:
  core::io::Awaitable<void> accept_loop(asio::ip::tcp::acceptor& acceptor,
                                        core::io::DescriptorReserve& reserve);
  void begin_shutdown();
  // On main_, once every listening socket is closed.
  void begin_drain();
  void poll_drain();
  core::net::Resolver& resolver_for(const asio::any_io_executor& ex);
  void open_listeners();
  void start_health();

  const Socks5Options& options_;
  Socks5Metrics metrics_;
  // konn_certificate_expiry_timestamp_seconds of the --konnectivity-* files, read at each scrape.
  core::admin::CertificateGauges certificates_{metrics_.registry()};
  std::unique_ptr<core::konnectivity::Dialer> konnectivity_;  // --konnectivity-address set
  std::unique_ptr<core::admin::AdminServer> health_;
  std::atomic<bool> accepting_{false};
  std::unique_ptr<UserDb> users_;
  asio::thread_pool auth_pool_{1};  // password hashing, off the I/O threads
  SessionRegistry registry_;
  Socks5Status status_{options_, registry_, certificates_};  // /status.json
  asio::io_context main_;
  core::io::WorkerPool pool_;  // after everything sessions use: destroyed before it
  std::vector<std::pair<asio::io_context*, std::unique_ptr<core::net::Resolver>>> resolvers_;
  std::vector<std::unique_ptr<asio::ip::tcp::acceptor>> acceptors_;  // acceptors_[i] on worker i
  asio::ip::tcp::endpoint endpoint_;
  asio::steady_timer drain_timer_;
  std::chrono::steady_clock::time_point drain_deadline_{};
  bool shutting_down_ = false;
  bool forced_ = false;
};

}  // namespace konn::socks5
