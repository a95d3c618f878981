#include "proxy-server/server_metrics.h"

#include "core/h2/grpc_status.h"

namespace konn::server {
namespace {

const std::string kPrefix = "konnectivity_network_proxy_server_";
const char* const kSegmentNames[] = {"from_client", "to_client", "from_agent", "to_agent"};
// Upstream's buckets, so that dashboards and quantiles copied from upstream read the same:
// latencyBuckets (1 µs .. 12.5 s) for dials and frontend writes, connectionDurationBuckets
// (1 s .. 24 h) for tunnel lifetimes.
const prometheus::Histogram::BucketBoundaries kLatencyBuckets{1e-6, 1e-5, 1e-4, 0.005, 0.025,
                                                              0.1,  0.5,  2.5,  12.5};
const prometheus::Histogram::BucketBoundaries kConnectionDurationBuckets{
    1, 5, 15, 30, 60, 300, 900, 1800, 3600, 14400, 43200, 86400};

template <typename Builder>
auto& build(Builder b, core::metrics::Registry& r, const std::string& name,
            const std::string& help) {
  return b.Name(kPrefix + name).Help(help).Register(r.prometheus());
}

}  // namespace

ServerMetrics::ServerMetrics(core::metrics::Registry& r)
    : dial_duration_seconds(build(prometheus::BuildHistogram(), r, "dial_duration_seconds",
                                  "Latency of dial to the remote endpoint in seconds")),
      frontend_write_duration_seconds(build(prometheus::BuildHistogram(), r,
                                            "frontend_write_duration_seconds",
                                            "Latency of write to the frontend in seconds")),
      connection_duration_seconds(build(prometheus::BuildHistogram(), r,
                                        "connection_duration_seconds",
                                        "Duration in seconds a proxied end-to-end connection was "
                                        "established (post-dial) before being closed")),
      grpc_connections(build(prometheus::BuildGauge(), r, "grpc_connections",
                             "Number of current grpc connections, partitioned by service method")),
      http_connections(build(prometheus::BuildGauge(), r, "http_connections",
                             "Number of current HTTP CONNECT connections")),
      ready_backend_connections(build(prometheus::BuildGauge(), r, "ready_backend_connections",
                                      "Number of konnectivity agent connected to the proxy "
                                      "server (deprecated: use ready_backends)")),
      ready_backends(build(prometheus::BuildGauge(), r, "ready_backends",
                           "Number of konnectivity agent connected to the proxy server, per "
                           "proxy strategy (destHost: distinct identifiers)")),
      pending_backend_dials(build(prometheus::BuildGauge(), r, "pending_backend_dials",
                                  "Current number of pending backend dial requests")),
      established_connections(build(prometheus::BuildGauge(), r, "established_connections",
                                    "Current number of established end-to-end connections")),
      full_receive_channels(build(prometheus::BuildGauge(), r, "full_receive_channels",
                                  "Number of current connections blocked by a full receive "
                                  "channel, partitioned by service method")),
      full_frontend_write_queues(build(prometheus::BuildGauge(), r, "full_frontend_write_queues",
                                       "Number of HTTP CONNECT tunnels whose queue towards the "
                                       "client is full (konn: holds its full mark, 4 MiB or half "
                                       "the tunnel's cap)")),
      blocked_frontend_write_channels(build(prometheus::BuildGauge(), r,
                                            "blocked_frontend_write_channels",
                                            "Number of agent streams not read because clients "
                                            "are behind (konn: agents without konn's flow "
                                            "control only)")),
      dial_failure_count(build(prometheus::BuildCounter(), r, "dial_failure_count",
                               "Number of dial failures observed, by reason")),
      stream_packets_total(build(prometheus::BuildCounter(), r, "stream_packets_total",
                                 "Count of packets processed, by segment and packet type")),
      stream_errors_total(build(prometheus::BuildCounter(), r, "stream_errors_total",
                                "Count of gRPC stream errors, by segment, code and packet type")),
      culled_leases_count(build(prometheus::BuildCounter(), r, "culled_leases_count",
                                "Count of expired leases that the lease garbage collection "
                                "controller has culled")),
      lease_delete_latency_seconds(build(prometheus::BuildHistogram(), r,
                                         "lease_delete_latency_seconds",
                                         "Latency of lease delete calls, by HTTP status code")),
      lease_delete_total(build(prometheus::BuildCounter(), r, "lease_delete_total",
                               "Lease delete calls, by HTTP status code and reason")),
      lease_list_latency_seconds(build(prometheus::BuildHistogram(), r,
                                       "lease_list_latency_seconds",
                                       "Latency of lease list calls, by HTTP status code")),
      lease_list_total(build(prometheus::BuildCounter(), r, "lease_list_total",
                             "Lease list calls, by HTTP status code and reason")),
      tunnels_over_cap_total(build(prometheus::BuildCounter(), r, "tunnels_over_cap_total",
                                   "konn: tunnels closed alone because their client did not "
                                   "keep up: their queue passed its cap, or the client took "
                                   "nothing for --stalled-client-timeout")),
      reads_paused_total(build(prometheus::BuildCounter(), r, "reads_paused_total",
                               "konn: times reading was paused, by reason (queue_full, "
                               "no_credit: a frontend stream; clients_behind: the stream of an "
                               "agent without flow control)")),
      bytes_total(build(prometheus::BuildCounter(), r, "bytes_total",
                        "konn: tunnel payload bytes, by direction (to_agent, to_client)")),
      limits_hit_total(build(prometheus::BuildCounter(), r, "limits_hit_total",
                             "konn: streams, connections and dials refused by a limit, by limit")),
      agents_rejected_total(build(prometheus::BuildCounter(), r, "agents_rejected_total",
                                  "konn: agent streams refused at admission, by reason (metadata, "
                                  "token, identifiers)")),
      half_closed_tunnels(build(prometheus::BuildGauge(), r, "half_closed_tunnels",
                                "konn: established tunnels with one side finished sending "
                                "(half-close), until the tunnel closes")),
      tunnel_timeouts_total(build(prometheus::BuildCounter(), r, "tunnel_timeouts_total",
                                  "konn: tunnels closed for lack of traffic, by reason "
                                  "(half_close: --half-close-timeout, idle: "
                                  "--tunnel-idle-timeout)")),
      grpc_proxy(grpc_connections.Add({{"service_method", "Proxy"}})),
      grpc_connect(grpc_connections.Add({{"service_method", "Connect"}})),
      http_connect(http_connections.Add({})),
      pending(pending_backend_dials.Add({})),
      established(established_connections.Add({})),
      half_closed(half_closed_tunnels.Add({})),
      full_write_queues(full_frontend_write_queues.Add({})),
      blocked_write_channels(blocked_frontend_write_channels.Add({})),
      dial_duration(dial_duration_seconds.Add({}, kLatencyBuckets)),
      connection_duration(connection_duration_seconds.Add({}, kConnectionDurationBuckets)),
      bytes_to_agent(bytes_total.Add({{"direction", "to_agent"}})),
      bytes_to_client(bytes_total.Add({{"direction", "to_client"}})) {
  frontend_write_duration_seconds.Add({}, kLatencyBuckets);
  ready_backend_connections.Add({});
  culled_leases_count.Add({});
  tunnels_over_cap_total.Add({});
  // Shown at 0 from the start, so a dashboard's rate() has a series before the first pause.
  for (const char* reason : {"queue_full", "no_credit", "clients_behind"}) {
    reads_paused_total.Add({{"reason", reason}});
  }
  for (const char* m : {"Proxy", "Connect"}) full_receive_channels.Add({{"service_method", m}});
  for (const char* reason : {"no_agent", "error_response", "unrecognized_response", "send_rsp",
                             "backend_close", "backend_dial_timeout", "frontend_close"}) {
    dial_failure_count.Add({{"reason", reason}});
  }
  for (int seg = 0; seg < kSegments; ++seg) {
    for (int t = 0; t < core::tunnel::kPacketTypeSlots; ++t) {
      packets_[seg][t] = &stream_packets_total.Add(
          {{"segment", kSegmentNames[seg]}, {"packet_type", core::tunnel::packet_type_label(t)}});
    }
  }
  // Shown at 0 from the start, so an alert on a limit has a series before it is first hit.
  for (const char* limit : {"frontend_streams", "pending_dials", "pending_dials_per_agent",
                            "tunnels_per_agent", "dial_request_timeout", "handshake_timeout",
                            "connect_header_size", "connect_header_timeout"}) {
    limits_hit_total.Add({{"limit", limit}});
  }
  for (const char* reason : {"half_close", "idle"}) tunnel_timeouts_total.Add({{"reason", reason}});
  for (const char* reason : {"metadata", "token", "identifiers", "listener"}) {
    agents_rejected_total.Add({{"reason", reason}});
  }
}

namespace {

const prometheus::Histogram::BucketBoundaries kApiLatencyBuckets{
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

}  // namespace

void ServerMetrics::lease_list(int http_status, const std::string& reason, double seconds) {
  std::string code = std::to_string(http_status);
  lease_list_total.Add({{"http_status_code", code}, {"reason", reason}}).Increment();
  lease_list_latency_seconds.Add({{"http_status_code", code}}, kApiLatencyBuckets).Observe(seconds);
}

void ServerMetrics::lease_delete(int http_status, const std::string& reason, double seconds) {
  std::string code = std::to_string(http_status);
  lease_delete_total.Add({{"http_status_code", code}, {"reason", reason}}).Increment();
  lease_delete_latency_seconds.Add({{"http_status_code", code}}, kApiLatencyBuckets)
      .Observe(seconds);
}

void ServerMetrics::packet(Segment segment, int type) {
  packets_[segment][core::tunnel::packet_type_slot(type)]->Increment();
}

void ServerMetrics::stream_error(Segment segment, int code, int type) {
  stream_errors_total
      .Add({{"segment", kSegmentNames[segment]},
            {"code", core::tunnel::grpc_code_name(code)},
            {"packet_type", core::tunnel::packet_type_label(core::tunnel::packet_type_slot(type))}})
      .Increment();
}

void ServerMetrics::call_errors(Segment read, Segment write, bool cancelled,
                                int failed_write_type) {
  if (cancelled) stream_error(read, core::h2::grpc_code::kCancelled, -1);
  if (failed_write_type >= 0) {
    stream_error(write,
                 cancelled ? core::h2::grpc_code::kCancelled : core::h2::grpc_code::kUnavailable,
                 failed_write_type);
  }
}

}  // namespace konn::server
