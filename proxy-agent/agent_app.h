#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>

#include "core/admin/admin_server.h"
#include "core/admin/certificate_gauges.h"
#include "core/io/worker_pool.h"
#include "proxy-agent/agent_metrics.h"
#include "proxy-agent/agent_status.h"
#include "proxy-agent/agent_options.h"
#include "proxy-agent/agent_stats.h"
#include "proxy-agent/lease_counter.h"
#include "proxy-agent/node_listener.h"
#include "proxy-agent/server_set.h"

namespace konn::agent {

// The proxy-agent process, wired: an Asio WorkerPool (worker_count() threads named
// agent-worker-N) for the server connections and their endpoint sockets, one control
// io_context (its own thread) for the connect/probe loops, signals and the drain watch, and the
// ServerSet holding the streams, whose HTTP/2 connections live on the pool's workers with the
// endpoint sockets of their tunnels. Tests run it in process with start()/stop(); main() calls
// run().
class AgentApp {
 public:
  // `options` must be validated.
  explicit AgentApp(const AgentOptions& options);
  ~AgentApp();
  AgentApp(const AgentApp&) = delete;
  AgentApp& operator=(const AgentApp&) = delete;

  // Starts the threads, the connect loop and (--count-server-leases) the lease counter; returns
  // at once. Throws std::runtime_error when the kubeconfig for the lease list cannot be used.
  void start();
  // Graceful shutdown, as on the first SIGTERM: DRAIN every stream, make no new server
  // connections, close the node-to-control-plane side, and keep serving (open tunnels and the
  // dials a server still sends, as it does when every agent drains) until a second signal or
  // --drain-timeout (then run() returns 0).
  void drain();
  // Ends the streams (cancelled, or half-closed and awaited for a bounded time when
  // `graceful`), then the loops and threads. Idempotent.
  void stop(bool graceful = false);
  // start(), then serve until --drain-timeout after a signal (graceful stop) or a second signal
  // (streams cancelled); exit code 0 either way.
  int run();

  ServerSet& servers() { return *servers_; }
  const AgentStats& stats() const { return *stats_; }
  // Node-to-control-plane connections' counters.
  const AgentStats& node_stats() const { return *node_stats_; }
  // Bound ports of the health (/healthz /readyz /metrics) and admin (/metrics) listeners; 0 when
  // a listener could not start.
  uint16_t health_port() const { return health_ ? health_->port() : 0; }
  uint16_t admin_port() const { return admin_ ? admin_->port() : 0; }

  // The pool's workers on a machine of `cores`: one per core, at most kMaxWorkers. A server
  // connection's tunnels all run on its one worker, so the agent keeps busy only as many workers
  // as it has server (and node-to-control-plane) connections. An idle worker still costs a
  // thread, an epoll, an eventfd and a timerfd, and about 17 KiB of RSS (measured with 1 and 32
  // workers), paid on every node of a DaemonSet.
  static constexpr unsigned kMaxWorkers = 4;
  static unsigned worker_count(unsigned cores);
  // Bound ports of the --node-to-control-plane-listen addresses, in flag order.
  std::vector<uint16_t> node_listen_ports() const {
    return node_listener_ ? node_listener_->ports() : std::vector<uint16_t>{};
  }

 private:
  // Health and admin listeners. A port already in use is logged, not fatal: the tunnel matters
  // more than its probes.
  void start_listeners();
  // Ends run() with `exit_code`, stopping gracefully or not; the first call wins.
  void finish(int exit_code, bool graceful = true);
  core::io::Awaitable<void> watch_drain();

  const AgentOptions options_;  // a copy: the loops read it for the app's whole life
  std::shared_ptr<AgentStats> stats_ = std::make_shared<AgentStats>();
  std::shared_ptr<AgentStats> node_stats_ = std::make_shared<AgentStats>();
  core::io::WorkerPool pool_{worker_count(std::thread::hardware_concurrency()), "agent-worker"};
  asio::io_context control_{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread control_thread_;
  std::shared_ptr<ServerSet> servers_;
  AgentMetrics metrics_{stats_,
                        options_.node_to_control_plane_listen.empty() ? nullptr : node_stats_};
  // konn_certificate_expiry_timestamp_seconds of --agent-cert and --ca-cert, read again at each
  // scrape (the agent reads the files again at each connection attempt).
  core::admin::CertificateGauges certificates_{metrics_.registry()};
  std::unique_ptr<AgentStatus> status_;
  std::shared_ptr<NodeListener> node_listener_;  // with --node-to-control-plane-listen
  std::unique_ptr<core::admin::AdminServer> health_;
  std::unique_ptr<core::admin::AdminServer> admin_;
  std::unique_ptr<LeaseCounter> leases_;
  bool started_ = false;
  bool stopped_ = false;

  std::mutex exit_mu_;
  std::condition_variable exit_cv_;
  std::optional<int> exit_code_;  // guarded by exit_mu_
  bool exit_graceful_ = true;     // guarded by exit_mu_
};

}  // namespace konn::agent
