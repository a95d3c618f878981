#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <spdlog/logger.h>

#include "core/io/asio_compat.h"
#include "core/kube/lease.h"
#include "proxy-server/server_metrics.h"

namespace konn::server {

// --enable-lease-controller: publishes this server in a coordination.k8s.io/v1 Lease named
// `konnectivity-proxy-server-<server-id>` carrying --lease-label, renews it every renew interval
// (holderIdentity = server id, leaseDurationSeconds = 2 × renew interval, renewTime = now), and
// deletes expired leases that carry the same labels (with a resourceVersion precondition, so a
// lease renewed meanwhile survives). Agents running --count-server-leases count the valid ones.
//
// Threads: everything runs on a private io_context and thread: an apiserver call (bounded by
// `request_timeout`, a token refresh may even run an exec plugin) never delays a tunnel. An
// unreachable apiserver is logged and retried at the next tick.
class LeaseController {
 public:
  struct Settings {
    std::string server_id;
    std::string lease_namespace = "kube-system";
    core::kube::Labels labels;
    std::chrono::milliseconds renew_interval{15000};  // also the garbage collection period
    std::chrono::milliseconds request_timeout{5000};
  };

  LeaseController(core::kube::ApiTarget target, Settings settings, ServerMetrics& metrics);
  ~LeaseController();
  LeaseController(const LeaseController&) = delete;
  LeaseController& operator=(const LeaseController&) = delete;

  // Starts the thread; the first renewal and collection run at once.
  void start();
  // Stops renewing and deletes this server's own lease (by name) so agents stop counting it,
  // then joins the thread. Bounded by about two request timeouts (one call in flight, then the
  // delete). Idempotent.
  void stop();

  static std::string lease_name(const std::string& server_id) {
    return "konnectivity-proxy-server-" + server_id;
  }

 private:
  core::io::Awaitable<void> renew_loop();
  core::io::Awaitable<void> gc_loop();
  core::io::Awaitable<void> renew_once();
  core::io::Awaitable<void> collect_once();
  core::io::Awaitable<void> release();
  // The lease as this server writes it, on top of `base` (the stored object, or a new one).
  core::kube::Lease renewed(core::kube::Lease base) const;
  void observe_list(const core::kube::LeaseClient::Result& r);
  void observe_delete(const core::kube::LeaseClient::Result& r);

  // Declared first: destroyed last, after everything that refers to it.
  asio::io_context ctx_{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  core::kube::LeaseClient client_;
  Settings settings_;
  std::string name_;
  std::string selector_;
  ServerMetrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  int loops_ = 0;                         // ctx_ only: loops still running
  std::optional<core::kube::Lease> own_;  // ctx_ only: last stored version of our lease
  bool renew_failing_ = false;            // ctx_ only: log a failure once until it recovers
  std::unique_ptr<asio::steady_timer> renew_timer_;
  std::unique_ptr<asio::steady_timer> gc_timer_;
  std::unique_ptr<asio::steady_timer> stopped_;  // fires when both loops ended
};

}  // namespace konn::server
