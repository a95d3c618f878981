#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include "core/metrics/metrics.h"
#include "proxy-agent/agent_stats.h"

namespace konn::agent {

// The agent's /metrics: AgentStats under upstream ANP's agent metric names, types and labels
// (konnectivity_network_proxy_agent_*), plus konn's own counters (konn_agent_*: flow control,
// bytes, refused dials, limits).
// The data plane only bumps AgentStats atomics; serialize() copies them into the Prometheus
// registry at scrape time. Thread-safe (one lock, held during a scrape).
class AgentMetrics {
 public:
  // `node_stats`: the node-to-control-plane connections' counters (konn_agent_node_*), or null.
  explicit AgentMetrics(std::shared_ptr<const AgentStats> stats,
                        std::shared_ptr<const AgentStats> node_stats = nullptr);
  AgentMetrics(const AgentMetrics&) = delete;
  AgentMetrics& operator=(const AgentMetrics&) = delete;

  // Prometheus text exposition of every agent metric and the process_* basics.
  std::string serialize();
  // For families registered elsewhere (konn_certificate_expiry_timestamp_seconds).
  core::metrics::Registry& registry() { return registry_; }
  // One answered lease list (lease_lists_total, lease_list_latency_seconds); any thread.
  void lease_list(int http_status, const std::string& reason, double seconds);
  // One answered lease watch call (lease_watches_total); any thread.
  void lease_watch(int http_status, const std::string& reason);

 private:
  struct CounterLink {
    const std::atomic<uint64_t>* source;
    prometheus::Counter* target;
    uint64_t seen = 0;
  };
  struct GaugeLink {
    const std::atomic<int64_t>* source;
    prometheus::Gauge* target;
  };

  std::shared_ptr<const AgentStats> stats_;
  std::shared_ptr<const AgentStats> node_stats_;
  std::mutex mu_;
  core::metrics::Registry registry_;
  std::vector<CounterLink> counters_;
  std::vector<GaugeLink> gauges_;
  prometheus::Histogram* dial_duration_ = nullptr;
  std::array<uint64_t, AgentStats::kDialBuckets.size() + 1> dial_buckets_seen_{};
  uint64_t dial_nanos_seen_ = 0;
  prometheus::Family<prometheus::Counter>* stream_errors_ = nullptr;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> stream_errors_seen_;
  prometheus::Family<prometheus::Counter>* lease_lists_ = nullptr;
  prometheus::Family<prometheus::Histogram>* lease_list_latency_ = nullptr;
  prometheus::Family<prometheus::Counter>* lease_watches_ = nullptr;
};

}  // namespace konn::agent
