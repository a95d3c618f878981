#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "core/io/asio_compat.h"
#include "core/kube/lease.h"
#include "proxy-agent/agent_metrics.h"

namespace konn::agent {

// --count-server-leases: lists the proxy-servers' Leases (--lease-namespace,
// --lease-label-selector) every poll interval and reports how many are valid (renew time plus
// duration in the future, as upstream's IsLeaseValid). A failed list is logged and reported as
// nothing: the last count stays in force.
//
// Threads: a private io_context and thread, so an apiserver call (bounded by `request_timeout`)
// never delays a tunnel or the connect loop. `on_count` runs on that thread.
class LeaseCounter {
 public:
  struct Settings {
    std::string lease_namespace = "kube-system";
    std::string selector = "k8s-app=konnectivity-server";
    std::chrono::milliseconds poll_interval{10000};
    std::chrono::milliseconds request_timeout{5000};
  };

  LeaseCounter(core::kube::ApiTarget target, Settings settings, AgentMetrics& metrics,
               std::function<void(int64_t)> on_count);
  ~LeaseCounter();
  LeaseCounter(const LeaseCounter&) = delete;
  LeaseCounter& operator=(const LeaseCounter&) = delete;

  // Starts the thread; the first list runs at once.
  void start();
  // Stops polling and joins the thread (bounded by one request timeout). Idempotent.
  void stop();

 private:
  core::io::Awaitable<void> poll_loop();

  asio::io_context ctx_{1};  // first: destroyed last
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  core::kube::LeaseClient client_;
  Settings settings_;
  AgentMetrics& metrics_;
  std::function<void(int64_t)> on_count_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<asio::steady_timer> timer_;  // ctx_ only
  std::optional<int64_t> last_;                // ctx_ only
  bool failing_ = false;                       // ctx_ only
};

}  // namespace konn::agent
