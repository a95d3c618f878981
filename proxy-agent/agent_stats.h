#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/endpoint/endpoint_stats.h"
#include "core/tunnel/packet.h"
#include "proxy-agent/egress_proxy.h"

namespace konn::agent {

// Every counter of the agent, in one place (STYLE rule 13): the endpoint connections' own
// (core::endpoint::EndpointStats, shared with the server's node-to-control-plane dials) and the
// agent's streams and servers. Shared by all streams and connections of one agent; lock-free
// except the rare stream errors. AgentMetrics maps them onto upstream ANP's agent metric names
// (and konn's own) at scrape time.
struct AgentStats : core::endpoint::EndpointStats {
  std::atomic<int64_t> open_server_connections{0};   // accepted streams
  std::atomic<int64_t> known_server_count{0};        // the last servercount taken
  std::atomic<uint64_t> server_connect_failures{0};  // attempts that got no usable stream
  std::atomic<uint64_t> server_send_failures{0};     // server_connection_failure_count{to_server}
  std::atomic<uint64_t> server_recv_failures{0};     // ...{from_server}
  std::atomic<uint64_t> duplicate_servers{0};
  // Node to control plane only: connections closed at accept because no server confirmed it.
  std::atomic<uint64_t> no_server_refusals{0};

  // Failed connection attempts through an egress HTTP proxy, by ProxyFailure::Reason
  // (konn_agent_egress_proxy_failures_total{reason}; also in server_connect_failures).
  std::array<std::atomic<uint64_t>, ProxyFailure::kReasons> egress_proxy_failures{};

  // stream_packets_total: sent to a server (segment from_agent) and received (to_agent), by
  // core::tunnel::packet_type_slot().
  std::array<std::atomic<uint64_t>, core::tunnel::kPacketTypeSlots> packets_sent{};
  std::array<std::atomic<uint64_t>, core::tunnel::kPacketTypeSlots> packets_received{};

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
};

}  // namespace konn::agent
