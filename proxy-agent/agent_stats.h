#pragma once

#include <atomic>
#include <cstdint>

namespace konn::agent {

// Every counter of the agent, in one place (STYLE rule 13). Shared by all streams and
// connections of one agent; lock-free. Names follow what ANP's agent metrics measure, so a
// /metrics exporter can map them one to one once core/metrics exists.
struct AgentStats {
  std::atomic<uint64_t> dials{0};                   // DIAL_REQ handled
  std::atomic<uint64_t> dial_failures{0};           // endpoint_dial_failure_total{unknown}
  std::atomic<uint64_t> dial_timeouts{0};           // endpoint_dial_failure_total{timeout}
  std::atomic<uint64_t> dials_cancelled{0};         // DIAL_CLS that stopped a dial
  std::atomic<int64_t> open_endpoint_connections{0};
  std::atomic<int64_t> open_server_connections{0};  // accepted streams
  std::atomic<int64_t> known_server_count{0};       // the last servercount taken
  std::atomic<uint64_t> server_connect_failures{0};
  std::atomic<uint64_t> duplicate_servers{0};
  std::atomic<uint64_t> read_pauses{0};             // an endpoint socket stopped being read
  std::atomic<uint64_t> read_resumes{0};
  std::atomic<uint64_t> queue_overflow_closes{0};   // a connection over its write cap, closed alone
  std::atomic<uint64_t> window_updates_sent{0};
  std::atomic<uint64_t> unknown_connect_ids{0};     // DATA/CLOSE_REQ for a connection we lack
  std::atomic<uint64_t> packets_received{0};        // stream_packets_total{to_agent}
  std::atomic<uint64_t> bytes_to_endpoints{0};
  std::atomic<uint64_t> bytes_from_endpoints{0};
};

}  // namespace konn::agent
