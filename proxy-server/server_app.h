#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include <asio/io_context.hpp>
#include <spdlog/logger.h>

#include "core/admin/admin_server.h"
#include "core/admin/certificate_gauges.h"
#include "core/io/worker_pool.h"
#include "core/metrics/metrics.h"
#include "core/h2/listener.h"
#include "core/tls/reloading_context.h"
#include "proxy-server/server_metrics.h"
#include "proxy-server/server_options.h"

namespace konn::server {

class Router;
class HttpConnectServer;
class TokenReviewer;
class LeaseController;
class NodeService;
class ServerStatus;

// Wires one proxy-server: the Router, the frontend listener (gRPC on core/h2 over a unix socket or
// TCP+mTLS, or HTTP CONNECT), the agent listener (gRPC on core/h2, TLS, optionally mTLS), the
// worker pool that runs their connections, a timer thread (which also accepts), the lease
// controller, and signal handling.
//
// Shutdown (first SIGTERM/SIGINT): the server turns not-ready (`/readyz` fails its `shutdown`
// check), deletes its lease, stops accepting frontends and agents, lets open tunnels run, and
// exits once none is left or --graceful-shutdown-timeout passed (0: at once). A second signal
// exits at once (status 1).
class ServerApp {
 public:
  explicit ServerApp(const ServerOptions& options);
  ~ServerApp();

  // Starts listening. Throws std::runtime_error with a message naming what failed.
  void start();
  // Blocks until SIGINT/SIGTERM (or stop()), then shuts down. Returns the exit code.
  int run();
  // Asks run() to return (tests).
  void stop();
  // As the first SIGTERM: turn not-ready, stop accepting, let open tunnels finish; run() returns
  // once none is left or the graceful timeout passed. Call from any thread.
  void drain();
  bool draining() const { return draining_.load(); }

  // Bound ports (useful when 0 was asked for).
  int agent_port() const { return agent_port_; }
  int frontend_port() const { return frontend_port_; }
  int health_port() const { return health_ ? health_->port() : 0; }
  int admin_port() const { return admin_ ? admin_->port() : 0; }
  Router& router() { return *router_; }

 private:
  void shutdown();
  // On signals_ctx_: the first step of a graceful shutdown.
  void begin_drain();
  // Frontend tunnels still open (gRPC Proxy streams and CONNECT connections).
  double open_tunnels() const;
  void start_admin();
  void start_leases();
  void start_http_connect();
  // TLS for `listener` from these files (mTLS when `client_ca` is set), rebuilt when they change
  // (--cert-reload-interval); keep the result as long as the listener.
  std::unique_ptr<core::tls::ReloadingServerContext> serve_tls(core::h2::Listener& listener,
                                                               const std::string& cert,
                                                               const std::string& key,
                                                               const std::string& client_ca,
                                                               const std::string& what);
  void start_grpc_frontend();
  void start_agent_listener();
  // Where a new frontend connection (gRPC or CONNECT) lives: the worker of the agent connection
  // its dial will most likely use (BackendRegistry::likely_home), else the pool's round robin.
  core::io::WorkerPool::Placement place_frontend();
  // The index in pool_ of a worker's context.
  size_t worker_index(const asio::io_context& ctx) const;
  void start_token_review();

  const ServerOptions& options_;
  std::shared_ptr<spdlog::logger> log_;
  core::metrics::Registry registry_;
  ServerMetrics metrics_{registry_};
  // konn_certificate_expiry_timestamp_seconds: the listeners' certificates, read again on reload.
  core::admin::CertificateGauges certificates_{registry_};
  std::unique_ptr<ServerStatus> status_;
  std::unique_ptr<core::admin::AdminServer> health_;
  std::unique_ptr<core::admin::AdminServer> admin_;
  asio::io_context timers_;
  std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>> timers_guard_;
  std::thread timer_thread_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<TokenReviewer> reviewer_;
  std::unique_ptr<LeaseController> leases_;
  // Runs every frontend and agent connection (and the CONNECT frontend); declared after the
  // router, which the reactions use, so it stops first.
  std::unique_ptr<core::io::WorkerPool> pool_;
  // gRPC mode: ProxyService on the unix socket or TCP+mTLS; its certificate files, when TLS.
  std::unique_ptr<core::h2::Listener> frontend_listener_;
  std::unique_ptr<core::tls::ReloadingServerContext> frontend_tls_;
  std::unique_ptr<HttpConnectServer> http_connect_;
  // --node-to-control-plane-destinations: the tunnels agents open towards the control plane.
  std::unique_ptr<NodeService> node_;
  // AgentService: TLS (mTLS with --cluster-ca-cert), and its certificate files.
  std::unique_ptr<core::h2::Listener> agent_listener_;
  std::unique_ptr<core::tls::ReloadingServerContext> agent_tls_;
  asio::io_context signals_ctx_;
  int agent_port_ = 0;
  int frontend_port_ = 0;
  bool shut_down_ = false;
  std::atomic<bool> draining_{false};
  std::chrono::steady_clock::time_point drain_deadline_;  // signals_ctx_ only
  std::thread lease_stopper_;                           // deletes the lease while the tunnels drain
  std::shared_ptr<std::function<void()>> drain_watch_;  // signals_ctx_ only
};

}  // namespace konn::server
