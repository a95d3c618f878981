#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "core/io/asio_compat.h"
#include "core/kube/lease.h"
#include "proxy-agent/agent_metrics.h"

namespace konn::agent {

// --count-server-leases: keeps the proxy-servers' Leases (--lease-namespace,
// --lease-label-selector) as upstream's informer does, and reports how many are valid (renew
// time plus duration in the future, as upstream's IsLeaseValid) whenever that changes.
//
// - Lists once (from the watch cache), then watches from the list's resourceVersion (with
//   bookmarks): a new, renewed or deleted lease is seen as soon as the apiserver sends it.
// - A watch the apiserver ends (its timeoutSeconds, 5-10 min) is opened again from the last
//   resourceVersion seen. A watch that breaks (refused, cut, malformed, silent, an ERROR event)
//   leads to a new list; a list that fails is retried with a backoff from 1 s up to
//   `poll_interval` (so without a working watch the leases are polled, as before), and the last
//   count stays in force meanwhile. 410 Gone (the version is too old) lists again at once.
// - A lease expires by the clock, not by an event: while a watch runs, a timer at the earliest
//   expiry of the valid leases recounts then. While none runs (the apiserver unreachable, or
//   watches refused), renewals cannot be seen, so the count stays what the last list or event
//   made it (the servers are most likely still there), and the next list counts afresh.
//
// Threads: a private io_context and thread, so an apiserver call (bounded by `request_timeout`)
// never delays a tunnel or the connect loop. `on_count` runs on that thread.
class LeaseCounter {
 public:
  struct Settings {
    std::string lease_namespace = "kube-system";
    std::string selector = "k8s-app=konnectivity-server";
    // The longest wait between two lists while no watch runs (--lease-poll-interval).
    std::chrono::milliseconds poll_interval{10000};
    std::chrono::milliseconds request_timeout{5000};
    // Each watch asks the apiserver to end it after this plus up to as much again (random),
    // as client-go's reflector does, so that a fleet of agents does not re-watch in step.
    std::chrono::seconds watch_timeout{300};
  };

  LeaseCounter(core::kube::ApiTarget target, Settings settings, AgentMetrics& metrics,
               std::function<void(int64_t)> on_count);
  ~LeaseCounter();
  LeaseCounter(const LeaseCounter&) = delete;
  LeaseCounter& operator=(const LeaseCounter&) = delete;

  // Starts the thread; the first list runs at once.
  void start();
  // Stops listing and watching (a watch in flight is cancelled) and joins the thread (bounded by
  // one request timeout). Idempotent.
  void stop();

 private:
  // What ended a watch, for the next step.
  enum class WatchOutcome { Ended, Expired, Broken, Stopped };

  core::io::Awaitable<void> run();
  core::io::Awaitable<bool> list();  // false: failed (logged, counted)
  core::io::Awaitable<WatchOutcome> watch();
  core::io::Awaitable<void> expiry_loop();
  // Waits `d` unless stop() comes first.
  core::io::Awaitable<void> pause(std::chrono::milliseconds d);
  void apply(const core::kube::LeaseEvent& event);
  // Counts the valid leases, reports the count, and sets the expiry timer to the earliest
  // expiry among them.
  void recount(const char* why);

  asio::io_context ctx_{1};  // first: destroyed last
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  core::kube::LeaseClient client_;
  Settings settings_;
  AgentMetrics& metrics_;
  std::function<void(int64_t)> on_count_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  // ctx_ only, from here on.
  std::unique_ptr<asio::steady_timer> stop_timer_;    // never fires; cancelled by stop()
  std::unique_ptr<asio::steady_timer> pause_timer_;   // backoff between lists
  std::unique_ptr<asio::steady_timer> expiry_timer_;  // the earliest expiry of a valid lease
  std::map<std::string, core::kube::Lease> leases_;   // by name
  std::string resource_version_;                      // where the next watch starts
  std::optional<int64_t> last_;                       // last count reported
  bool failing_ = false;                              // log a failure once until it recovers
  bool watch_answered_ = false;                       // the last watch got its 200
  bool watch_failing_ = false;                        // log a broken watch once until one runs
  bool watching_ = false;                             // a watch answered and still runs
  std::mt19937 rng_{std::random_device{}()};
};

}  // namespace konn::agent
