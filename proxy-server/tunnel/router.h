#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <asio/io_context.hpp>

#include "core/tunnel/deadlines.h"
#include "proxy-server/backend/backend_registry.h"
#include "proxy-server/server_metrics.h"
#include "proxy-server/server_options.h"
#include "proxy-server/status/dial_failure_log.h"
#include "proxy-server/tunnel/pending_dial_table.h"

namespace konn::server {

class TokenReviewer;
class NodeService;

// The state every frontend and backend of one proxy-server shares: the options, the connected
// agents, the dials awaiting an answer, an io_context for timers and the deadlines of the
// tunnels' waits (run on it). Owned by ServerApp and
// outliving every reactor (the listeners, their connections and the workers are stopped before
// it is destroyed).
class Router {
 public:
  Router(const ServerOptions& options, asio::io_context& timers, ServerMetrics& metrics);

  const ServerOptions& options() const { return options_; }
  BackendRegistry& backends() { return backends_; }
  PendingDialTable& pending() { return pending_; }
  asio::io_context& timers() { return timers_; }
  // A gRPC frontend's waits (for DIAL_REQ, DIAL_RSP, CLOSE_RSP): arming or cancelling one does
  // not wake the timer thread.
  core::tunnel::Deadlines& deadlines() { return deadlines_; }
  ServerMetrics& metrics() { return metrics_; }
  // Non-null when agents must present a service-account token (--agent-namespace).
  TokenReviewer* reviewer() { return reviewer_; }
  void set_reviewer(TokenReviewer* reviewer) { reviewer_ = reviewer; }
  // Non-null when --node-to-control-plane-destinations is set.
  NodeService* node() { return node_; }
  void set_node(NodeService* node) { node_ = node; }
  // Registry changes go through these so the ready_backends gauges follow, and then call the
  // hook set here (the frontends place their next connection again). The hook runs on the
  // caller's thread under a lock of its own; set it to nullptr before what it uses goes away.
  void add_backend(const std::shared_ptr<Backend>& backend);
  void remove_backend(const Backend* backend);
  void set_on_backends_changed(std::function<void()> hook);

  // --max-frontend-streams: takes a slot for a new gRPC frontend stream or CONNECT connection.
  // False when every slot is taken (counted in limits_hit_total and logged with `peer`); the
  // caller then refuses it. A taken slot is given back once, with release_frontend().
  bool acquire_frontend(const std::string& peer);
  void release_frontend();
  // Slots taken (the status page's limits).
  int64_t frontends_in_use() const { return frontends_.load(); }

  // A dial failed: counted in dial_failure_count{reason} and kept in the recent failures with
  // the agent that had it (nullptr: none chosen), the destination and the answer, which also
  // becomes the agent's last error. Any thread.
  void dial_failed(const std::string& reason, Backend* backend, const std::string& destination,
                   const std::string& error = {});
  const DialFailureLog& dial_failures() const { return dial_failures_; }

  // Why a dial was refused before reaching its agent.
  struct DialRefusal {
    std::string error;    // for DIAL_RSP.error and a CONNECT answer's body
    int http_status = 0;  // what a CONNECT client is answered
  };
  // Records the dial `random` routed to `backend` as pending, unless the dial id is pending
  // already or a limit is reached: --max-pending-dials, --max-pending-dials-per-agent,
  // --max-tunnels-per-agent (each counted in limits_hit_total and logged).
  std::optional<DialRefusal> add_pending(int64_t random, std::weak_ptr<Frontend> frontend,
                                         const Backend& backend);

 private:
  const ServerOptions& options_;
  BackendRegistry backends_;
  std::mutex hook_mu_;
  std::function<void()> on_backends_changed_;  // under hook_mu_
  PendingDialTable pending_;
  asio::io_context& timers_;
  core::tunnel::Deadlines deadlines_;
  ServerMetrics& metrics_;
  TokenReviewer* reviewer_ = nullptr;
  NodeService* node_ = nullptr;
  std::atomic<int64_t> frontends_{0};  // slots taken (--max-frontend-streams)
  DialFailureLog dial_failures_{kDialFailuresKept};
  void update_ready_gauges();
  void backends_changed();
};

}  // namespace konn::server
