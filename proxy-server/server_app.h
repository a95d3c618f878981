#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include <asio/io_context.hpp>
#include <grpcpp/server.h>
#include <spdlog/logger.h>

#include "core/admin/admin_server.h"
#include "core/io/worker_pool.h"
#include "core/metrics/metrics.h"
#include "core/tunnel/completion_driver.h"
#include "proxy-server/server_metrics.h"
#include "proxy-server/server_options.h"

namespace konn::server {

class Router;
class HttpConnectServer;
class TokenReviewer;
class ProxyServiceImpl;
class AgentServiceImpl;
class LeaseController;
class NodeService;

// Wires one proxy-server: the Router, the frontend gRPC server (unix socket or TCP+mTLS), the
// agent gRPC server (TLS, optionally mTLS), a timer thread, the lease controller, and signal
// handling.
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
  unsigned reload_seconds() const;
  void start_token_review();

  const ServerOptions& options_;
  std::shared_ptr<spdlog::logger> log_;
  core::metrics::Registry registry_;
  ServerMetrics metrics_{registry_};
  std::unique_ptr<core::admin::AdminServer> health_;
  std::unique_ptr<core::admin::AdminServer> admin_;
  asio::io_context timers_;
  std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>> timers_guard_;
  std::thread timer_thread_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<TokenReviewer> reviewer_;
  std::unique_ptr<LeaseController> leases_;
  std::unique_ptr<ProxyServiceImpl> proxy_service_;
  std::unique_ptr<AgentServiceImpl> agent_service_;
  std::unique_ptr<grpc::Server> frontend_server_;
  std::unique_ptr<core::io::WorkerPool> pool_;
  std::unique_ptr<HttpConnectServer> http_connect_;
  // --node-to-control-plane-destinations: the tunnels agents open towards the control plane.
  std::unique_ptr<NodeService> node_;
  std::unique_ptr<grpc::Server> agent_server_;
  // Drains agent_server_'s completion queue: the reactions of the agent streams, and of the gRPC
  // frontend's calls, run on its thread.
  std::unique_ptr<core::tunnel::CompletionDriver> agent_driver_;
  // Drains frontend_server_'s queue, where only the arrival of its calls is announced.
  std::unique_ptr<core::tunnel::CompletionDriver> frontend_driver_;
  asio::io_context signals_ctx_;
  int agent_port_ = 0;
  int frontend_port_ = 0;
  bool shut_down_ = false;
  std::atomic<bool> draining_{false};
  std::chrono::steady_clock::time_point drain_deadline_;  // signals_ctx_ only
  std::thread lease_stopper_;     // deletes the lease while the tunnels drain
  std::thread frontend_stopper_;  // grpc::Server::Shutdown(deadline) of the frontend
  std::thread agent_stopper_;     // and of the agent listener
  std::atomic<bool> frontend_stopped_{false};
  std::atomic<bool> agent_stopped_{false};
  std::shared_ptr<std::function<void()>> drain_watch_;  // signals_ctx_ only
};

}  // namespace konn::server
