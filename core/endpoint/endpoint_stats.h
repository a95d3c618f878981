#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "core/log/recent_events.h"

namespace konn::core::endpoint {

// The counters of the endpoint connections of one owner (the agent's forward tunnels and the
// connections its node-to-control-plane listener accepted; the server's dials for agents).
// Lock-free except the rare refusals. Each owner exports them under its own names: the agent's
// AgentStats extends this struct with its stream counters, the server's NodeService keeps it as it
// is.
struct EndpointStats {
  std::atomic<uint64_t> dials{0};            // DIAL_REQ handled
  std::atomic<uint64_t> dial_failures{0};    // endpoint_dial_failure_total{unknown}
  std::atomic<uint64_t> dial_timeouts{0};    // endpoint_dial_failure_total{timeout}
  std::atomic<uint64_t> dials_cancelled{0};  // DIAL_CLS that stopped a dial
  std::atomic<int64_t> open_endpoint_connections{0};
  std::atomic<uint64_t> read_pauses{0};  // an endpoint socket stopped being read
  std::atomic<uint64_t> read_resumes{0};
  std::atomic<uint64_t> queue_overflow_closes{0};  // a connection over its write cap, closed alone
  // Open endpoint connections with one side finished sending (half-close), until they close.
  std::atomic<int64_t> half_closed_endpoint_connections{0};
  std::atomic<uint64_t> half_close_timeouts{0};  // closed by --half-close-timeout
  std::atomic<uint64_t> window_updates_sent{0};
  std::atomic<uint64_t> unknown_connect_ids{0};  // DATA/CLOSE_REQ for a connection we lack
  std::atomic<uint64_t> bytes_to_endpoints{0};
  std::atomic<uint64_t> bytes_from_endpoints{0};

  // Dials refused before any connect (konn_agent_dials_refused_total{reason}).
  enum RefusedDial { RefusedDestination, RefusedProtocol, kRefusedDialReasons };
  static constexpr std::array<const char*, kRefusedDialReasons> kRefusedDialNames{"destination",
                                                                                  "protocol"};
  std::array<std::atomic<uint64_t>, kRefusedDialReasons> dials_refused{};
  // Limits that refused a dial (konn_agent_limits_hit_total{limit}).
  enum Limit { LimitEndpointConnections, kLimits };
  static constexpr std::array<const char*, kLimits> kLimitNames{"endpoint_connections"};
  std::array<std::atomic<uint64_t>, kLimits> limits_hit{};
  // Endpoint connections that exist (dialling, open or closing): what
  // --max-endpoint-connections bounds.
  std::atomic<int64_t> endpoint_slots{0};

  // dial_duration_seconds (successful dials), upstream's buckets: counts per bucket (the last is
  // +Inf, not cumulative), the sum in nanoseconds.
  static constexpr std::array<double, 7> kDialBuckets{0.005, 0.025, 0.1, 0.5, 2.5, 10, 30};
  std::array<std::atomic<uint64_t>, kDialBuckets.size() + 1> dial_duration_buckets{};
  std::atomic<uint64_t> dial_duration_nanos{0};
  void observe_dial(std::chrono::nanoseconds d) {
    double seconds = std::chrono::duration<double>(d).count();
    size_t i = 0;
    while (i < kDialBuckets.size() && seconds > kDialBuckets[i]) ++i;
    dial_duration_buckets[i].fetch_add(1, std::memory_order_relaxed);
    dial_duration_nanos.fetch_add(static_cast<uint64_t>(d.count()), std::memory_order_relaxed);
  }

  // The last dials refused or not made, for the status page: a bounded ring (the oldest goes
  // first), rare enough for a lock.
  struct Refusal {
    std::chrono::system_clock::time_point at;
    std::string reason;  // "protocol", "destination", "endpoint_connections", "dial_failed", ...
    std::string destination;
    std::string error;  // what the server was answered
  };
  static constexpr size_t kRefusalsKept = 32;
  void refused(std::string reason, std::string destination, std::string error) {
    refusals.record({std::chrono::system_clock::now(), std::move(reason), std::move(destination),
                     std::move(error)});
  }
  log::RecentEvents<Refusal> refusals{kRefusalsKept};
};

}  // namespace konn::core::endpoint
