#pragma once

#include <array>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>

#include "core/metrics/metrics.h"

namespace konn::socks5 {

// The daemon's Prometheus metrics (served on /metrics by the health listener). Thread-safe:
// prometheus-cpp counters are atomic and Family::Add takes its own lock.
//   konn_socks5_sessions_total, konn_socks5_sessions_active
//   konn_socks5_requests_total{command}                connect | bind | udp_associate
//   konn_socks5_replies_total{code}                    REP as two hex digits ("00", "05", ...)
//   konn_socks5_bytes_total{direction}                 up (client → destination) | down
//   konn_socks5_dial_failures_total{upstream,reason}   upstream direct | konnectivity; reason
//       refused, net_unreachable, host_unreachable, timeout, no_agent, proxy_unavailable,
//       denied, resolve, other
//   konn_socks5_sessions_refused_total{limit}          max_sessions | max_sessions_per_client
//   konn_socks5_udp_dropped_total{reason}              UDP datagrams from clients not forwarded:
//       foreign_source, malformed, fragment, resolve, denied, no_socket
//   konn_socks5_splice_fallbacks_total                 relay directions that left splice(2) for
//       the buffered copy (splice unsupported on that socket)
class Socks5Metrics {
 public:
  Socks5Metrics();
  core::metrics::Registry& registry() { return registry_; }

  void session_opened();
  void session_closed(uint64_t bytes_up, uint64_t bytes_down);
  void request(const std::string& command);
  void reply(uint8_t code);
  void dial_failure(const std::string& upstream, const std::string& reason);
  // `limit` is the metric label: "max_sessions" or "max_sessions_per_client".
  void session_refused(const std::string& limit);
  enum class UdpDrop { ForeignSource, Malformed, Fragment, Resolve, Denied, NoSocket };
  // Per datagram, so the counters are looked up once (no label hashing on the datagram path).
  void udp_dropped(UdpDrop reason);
  void splice_fallback();

 private:
  core::metrics::Registry registry_;
  prometheus::Counter* sessions_total_;
  prometheus::Gauge* sessions_active_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* replies_;
  prometheus::Counter* bytes_up_;
  prometheus::Counter* bytes_down_;
  prometheus::Family<prometheus::Counter>* dial_failures_;
  prometheus::Family<prometheus::Counter>* sessions_refused_;
  std::array<prometheus::Counter*, 6> udp_dropped_{};  // indexed by UdpDrop
  prometheus::Counter* splice_fallbacks_;
};

}  // namespace konn::socks5
