#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/tunnel/packet.h"
#include "proxy-agent/egress_proxy.h"

namespace konn::agent {

// Every counter of the agent, in one place (STYLE rule 13). Shared by all streams and
// connections of one agent; lock-free except the rare stream errors. AgentMetrics maps them onto
// upstream ANP's agent metric names (and konn's own) at scrape time.
struct AgentStats {
  std::atomic<uint64_t> dials{0};            // DIAL_REQ handled
  std::atomic<uint64_t> dial_failures{0};    // endpoint_dial_failure_total{unknown}
  std::atomic<uint64_t> dial_timeouts{0};    // endpoint_dial_failure_total{timeout}
  std::atomic<uint64_t> dials_cancelled{0};  // DIAL_CLS that stopped a dial
  std::atomic<int64_t> open_endpoint_connections{0};
  std::atomic<int64_t> open_server_connections{0};   // accepted streams
  std::atomic<int64_t> known_server_count{0};        // the last servercount taken
  std::atomic<uint64_t> server_connect_failures{0};  // attempts that got no usable stream
  std::atomic<uint64_t> server_send_failures{0};     // server_connection_failure_count{to_server}
  std::atomic<uint64_t> server_recv_failures{0};     // ...{from_server}
  std::atomic<uint64_t> duplicate_servers{0};
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
  // Node to control plane only: connections closed at accept because no server confirmed it.
  std::atomic<uint64_t> no_server_refusals{0};

  // Dials refused before any connect (konn_agent_dials_refused_total{reason}).
  enum RefusedDial { RefusedDestination, RefusedProtocol, kRefusedDialReasons };
  static constexpr std::array<const char*, kRefusedDialReasons> kRefusedDialNames{"destination",
                                                                                  "protocol"};
  std::array<std::atomic<uint64_t>, kRefusedDialReasons> dials_refused{};
  // Limits that refused a dial (konn_agent_limits_hit_total{limit}).
  enum Limit { LimitEndpointConnections, kLimits };
  static constexpr std::array<const char*, kLimits> kLimitNames{"endpoint_connections"};
  std::array<std::atomic<uint64_t>, kLimits> limits_hit{};
  // Failed connection attempts through an egress HTTP proxy, by ProxyFailure::Reason
  // (konn_agent_egress_proxy_failures_total{reason}; also in server_connect_failures).
  std::array<std::atomic<uint64_t>, ProxyFailure::kReasons> egress_proxy_failures{};
  // Endpoint connections that exist (dialling, open or closing): what
  // --max-endpoint-connections bounds.
  std::atomic<int64_t> endpoint_slots{0};

  // stream_packets_total: sent to a server (segment from_agent) and received (to_agent), by
  // core::tunnel::packet_type_slot().
  std::array<std::atomic<uint64_t>, core::tunnel::kPacketTypeSlots> packets_sent{};
  std::array<std::atomic<uint64_t>, core::tunnel::kPacketTypeSlots> packets_received{};

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

  // The last dials this agent refused or could not make, for the status page: a bounded ring
  // (the oldest goes first), rare enough for a lock.
  struct Refusal {
    std::chrono::system_clock::time_point at;
    std::string reason;  // "protocol", "destination", "endpoint_connections", "dial_failed", ...
    std::string destination;
    std::string error;  // what the server was answered
  };
  static constexpr size_t kRefusalsKept = 32;
  void refused(std::string reason, std::string destination, std::string error) {
    std::lock_guard lock(errors_mu_);
    if (refusals_.size() == kRefusalsKept) refusals_.pop_front();
    refusals_.push_back({std::chrono::system_clock::now(), std::move(reason),
                         std::move(destination), std::move(error)});
  }
  std::deque<Refusal> refusals_snapshot() const {
    std::lock_guard lock(errors_mu_);
    return refusals_;
  }

  // stream_errors_total{segment, code, packet_type}: rare, so a locked map.
  void stream_error(const std::string& segment, const std::string& code,
                    const std::string& packet_type) {
    std::lock_guard lock(errors_mu_);
    ++stream_errors_[{segment, code, packet_type}];
  }
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> stream_errors_snapshot()
      const {
    std::lock_guard lock(errors_mu_);
    return stream_errors_;
  }

 private:
  mutable std::mutex errors_mu_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> stream_errors_;
  std::deque<Refusal> refusals_;  // under errors_mu_
};

}  // namespace konn::agent
