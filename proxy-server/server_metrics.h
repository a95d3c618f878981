#pragma once

#include <chrono>
#include <string>

#include "core/metrics/metrics.h"
#include "core/tunnel/packet.h"

namespace konn::server {

// Every proxy-server metric, with upstream ANP's names, types and labels (prefix
// konnectivity_network_proxy_server_), plus konn's own (marked). Built once per server from its
// registry; the families live in the registry, this struct holds references.
struct ServerMetrics {
  explicit ServerMetrics(core::metrics::Registry& registry);

  // Upstream.
  prometheus::Family<prometheus::Histogram>& dial_duration_seconds;
  prometheus::Family<prometheus::Histogram>& frontend_write_duration_seconds;
  prometheus::Family<prometheus::Histogram>& connection_duration_seconds;
  prometheus::Family<prometheus::Gauge>& grpc_connections;  // service_method
  prometheus::Family<prometheus::Gauge>& http_connections;
  prometheus::Family<prometheus::Gauge>& ready_backend_connections;
  prometheus::Family<prometheus::Gauge>& ready_backends;  // proxy_strategy
  prometheus::Family<prometheus::Gauge>& pending_backend_dials;
  prometheus::Family<prometheus::Gauge>& established_connections;
  prometheus::Family<prometheus::Gauge>& full_receive_channels;  // service_method
  // Upstream PR #896's, with konn's meaning (proxy-server/README.md, Metrics).
  prometheus::Family<prometheus::Gauge>& full_frontend_write_queues;
  prometheus::Family<prometheus::Gauge>& blocked_frontend_write_channels;
  prometheus::Family<prometheus::Counter>& dial_failure_count;    // reason (no _total, as upstream)
  prometheus::Family<prometheus::Counter>& stream_packets_total;  // segment, packet_type
  prometheus::Family<prometheus::Counter>& stream_errors_total;   // segment, code, packet_type
  prometheus::Family<prometheus::Counter>& culled_leases_count;
  prometheus::Family<prometheus::Histogram>& lease_delete_latency_seconds;  // http_status_code
  prometheus::Family<prometheus::Counter>& lease_delete_total;  // http_status_code, reason
  prometheus::Family<prometheus::Histogram>& lease_list_latency_seconds;  // http_status_code
  prometheus::Family<prometheus::Counter>& lease_list_total;  // http_status_code, reason
  // konn's own.
  prometheus::Family<prometheus::Counter>& tunnels_over_cap_total;
  prometheus::Family<prometheus::Counter>& reads_paused_total;     // reason
  prometheus::Family<prometheus::Counter>& bytes_total;            // direction
  prometheus::Family<prometheus::Counter>& limits_hit_total;       // limit
  prometheus::Family<prometheus::Counter>& agents_rejected_total;  // reason
  prometheus::Family<prometheus::Gauge>& half_closed_tunnels;
  prometheus::Family<prometheus::Counter>& tunnel_timeouts_total;  // reason

  prometheus::Gauge& grpc_proxy;
  prometheus::Gauge& grpc_connect;
  prometheus::Gauge& http_connect;  // http_connections' one series
  prometheus::Gauge& pending;
  prometheus::Gauge& established;
  prometheus::Gauge& half_closed;  // established tunnels with one side finished sending
  // HTTP CONNECT tunnels whose queue towards the client is at its full mark
  // (HttpConnectFrontend); agent streams not read because their clients are behind (Backend).
  prometheus::Gauge& full_write_queues;
  prometheus::Gauge& blocked_write_channels;
  prometheus::Histogram& dial_duration;
  prometheus::Histogram& connection_duration;
  prometheus::Counter& bytes_to_agent;
  prometheus::Counter& bytes_to_client;

  // One answered lease list or delete call (thread-safe; the lease controller's thread).
  void lease_list(int http_status, const std::string& reason, double seconds);
  void lease_delete(int http_status, const std::string& reason, double seconds);

  void dial_failure(const std::string& reason) {
    dial_failure_count.Add({{"reason", reason}}).Increment();
  }
  enum Segment { FromClient, ToClient, FromAgent, ToAgent, kSegments };
  // Counts one packet; lock-free after construction (counters are looked up once).
  void packet(Segment segment, int type);
  // stream_errors_total{segment, code, packet_type}: a read (no packet: `type` -1, labelled
  // "Unknown" as upstream does) or a write of a packet of `type` failed with gRPC status `code`.
  void stream_error(Segment segment, int code, int type);
  // The stream errors of a server call that is over and that we did not cancel ourselves, as
  // upstream counts them: a cancelled call's read as failed (no packet), and a failed write
  // (`failed_write_type` >= 0) with its packet type. The async API knows `cancelled` only then.
  void call_errors(Segment read, Segment write, bool cancelled, int failed_write_type);
  // limits_hit_total{limit} (konn): a limit refused a stream, connection or dial.
  void limit_hit(const std::string& limit) { limits_hit_total.Add({{"limit", limit}}).Increment(); }
  // tunnel_timeouts_total{reason} (konn): a tunnel closed by --half-close-timeout
  // ("half_close") or --tunnel-idle-timeout ("idle").
  void tunnel_timeout(const std::string& reason) {
    tunnel_timeouts_total.Add({{"reason", reason}}).Increment();
  }
  // A frontend tunnel ended: out of half_closed_tunnels when it was counted there, and out of
  // the established tunnels, with its connection_duration, when it was (at `established_at`).
  void tunnel_ended(bool half_counted, bool was_established,
                    std::chrono::steady_clock::time_point established_at) {
    if (half_counted) half_closed.Decrement();
    if (!was_established) return;
    established.Decrement();
    connection_duration.Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - established_at).count());
  }
  // agents_rejected_total{reason} (konn): an agent stream refused at admission.
  void agent_rejected(const std::string& reason) {
    agents_rejected_total.Add({{"reason", reason}}).Increment();
  }
  // ready_backends{proxy_strategy}: `count` as BackendRegistry::usable_by gives it.
  void set_ready(const std::string& strategy, double count) {
    ready_backends.Add({{"proxy_strategy", strategy}}).Set(count);
  }

 private:
  prometheus::Counter* packets_[kSegments][core::tunnel::kPacketTypeSlots] = {};
};

}  // namespace konn::server
