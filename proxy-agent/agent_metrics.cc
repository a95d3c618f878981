#include "proxy-agent/agent_metrics.h"

#include <prometheus/family.h>

namespace konn::agent {
namespace {

constexpr char kPrefix[] = "konnectivity_network_proxy_agent_";

// Upstream's agent latency buckets (5 ms .. 30 s), used for dials and lease lists.
const prometheus::Histogram::BucketBoundaries& latency_buckets() {
  static const prometheus::Histogram::BucketBoundaries buckets(AgentStats::kDialBuckets.begin(),
                                                               AgentStats::kDialBuckets.end());
  return buckets;
}

}  // namespace

AgentMetrics::AgentMetrics(std::shared_ptr<const AgentStats> stats,
                           std::shared_ptr<const AgentStats> node_stats)
    : stats_(std::move(stats)), node_stats_(std::move(node_stats)) {
  auto& r = registry_.prometheus();
  auto gauge = [&](const std::string& name, const std::string& help,
                   const std::atomic<int64_t>& source) {
    auto& family = prometheus::BuildGauge().Name(name).Help(help).Register(r);
    gauges_.push_back({&source, &family.Add({})});
  };
  auto counter = [&](prometheus::Family<prometheus::Counter>& family,
                     const std::map<std::string, std::string>& labels,
                     const std::atomic<uint64_t>& source) {
    counters_.push_back({&source, &family.Add(labels), 0});
  };
  const AgentStats& s = *stats_;
  dial_duration_ = &prometheus::BuildHistogram()
                        .Name(std::string(kPrefix) + "dial_duration_seconds")
                        .Help("Latency of dial to the remote endpoint in seconds")
                        .Register(r)
                        .Add({}, latency_buckets());
  gauge(std::string(kPrefix) + "open_server_connections",
        "Current number of open connections to proxy-servers", s.open_server_connections);
  gauge(std::string(kPrefix) + "known_server_count",
        "Number of proxy-servers the agent should connect to (last servercount)",
        s.known_server_count);
  gauge(std::string(kPrefix) + "open_endpoint_connections",
        "Current number of open endpoint connections", s.open_endpoint_connections);

  auto& dial_failures = prometheus::BuildCounter()
                            .Name(std::string(kPrefix) + "endpoint_dial_failure_total")
                            .Help("Endpoint dial failures by reason")
                            .Register(r);
  counter(dial_failures, {{"reason", "timeout"}}, s.dial_timeouts);
  counter(dial_failures, {{"reason", "unknown"}}, s.dial_failures);
  auto& server_failures =
      prometheus::BuildCounter()
          .Name(std::string(kPrefix) + "server_connection_failure_count")
          .Help(
              "Failures to send to (to_server) or receive from (from_server) a proxy-server "
              "(deprecated: use stream_errors_total)")
          .Register(r);
  counter(server_failures, {{"direction", "to_server"}}, s.server_send_failures);
  counter(server_failures, {{"direction", "from_server"}}, s.server_recv_failures);
  auto& packets = prometheus::BuildCounter()
                      .Name(std::string(kPrefix) + "stream_packets_total")
                      .Help(
                          "Packets sent to (from_agent) and received from (to_agent) "
                          "proxy-servers, by packet type")
                      .Register(r);
  for (int t = 0; t < core::tunnel::kPacketTypeSlots; ++t) {
    std::string type = core::tunnel::packet_type_label(t);
    counter(packets, {{"segment", "from_agent"}, {"packet_type", type}}, s.packets_sent[t]);
    counter(packets, {{"segment", "to_agent"}, {"packet_type", type}}, s.packets_received[t]);
  }
  stream_errors_ = &prometheus::BuildCounter()
                        .Name(std::string(kPrefix) + "stream_errors_total")
                        .Help("gRPC stream errors, by segment, gRPC code and packet type")
                        .Register(r);

  // Leases (--count-server-leases): one list at start and after a watch broke, one watch call
  // per watch opened (upstream v0.36 counted its watch calls in lease_lists_total by a slip,
  // fixed on its master: konn counts as the fix does).
  lease_lists_ = &prometheus::BuildCounter()
                      .Name(std::string(kPrefix) + "lease_lists_total")
                      .Help(
                          "Count of server lease list calls made by the agent to the k8s "
                          "apiserver, labeled by HTTP response code and reason")
                      .Register(r);
  lease_list_latency_ = &prometheus::BuildHistogram()
                             .Name(std::string(kPrefix) + "lease_list_latency_seconds")
                             .Help("Latency of server lease listing in seconds")
                             .Register(r);
  lease_watches_ = &prometheus::BuildCounter()
                        .Name(std::string(kPrefix) + "lease_watches_total")
                        .Help(
                            "Count of server lease watch calls made by the agent to the k8s "
                            "apiserver, labeled by HTTP response code and reason")
                        .Register(r);

  auto own = [&](const std::string& name, const std::string& help,
                 const std::map<std::string, std::string>& labels,
                 const std::atomic<uint64_t>& source) {
    auto& family = prometheus::BuildCounter().Name("konn_agent_" + name).Help(help).Register(r);
    counter(family, labels, source);
  };
  own("dials_total", "DIAL_REQ handled", {}, s.dials);
  own("dials_cancelled_total", "Dials stopped by DIAL_CLS or a lost stream", {}, s.dials_cancelled);
  own("duplicate_servers_total", "Streams dropped because the server was already connected", {},
      s.duplicate_servers);
  own("server_connect_failures_total",
      "Connection attempts to a proxy-server that gave no usable stream", {},
      s.server_connect_failures);
  own("endpoint_queue_overflow_total",
      "Endpoint connections closed alone because their write queue passed its cap", {},
      s.queue_overflow_closes);
  own("half_close_timeouts_total",
      "Endpoint connections closed because one side had finished sending and nothing moved for "
      "--half-close-timeout",
      {}, s.half_close_timeouts);
  gauge("konn_agent_half_closed_connections",
        "Open endpoint connections with one side finished sending (half-close)",
        s.half_closed_endpoint_connections);
  own("read_pauses_total", "Times an endpoint socket stopped being read (queue or credit)", {},
      s.read_pauses);
  own("window_updates_sent_total", "KONN_WINDOW_UPDATE packets sent", {}, s.window_updates_sent);
  own("unknown_connect_ids_total", "DATA or CLOSE_REQ for a connection the agent does not have", {},
      s.unknown_connect_ids);
  auto& bytes = prometheus::BuildCounter()
                    .Name("konn_agent_bytes_total")
                    .Help("Bytes relayed, by direction")
                    .Register(r);
  counter(bytes, {{"direction", "to_endpoint"}}, s.bytes_to_endpoints);
  counter(bytes, {{"direction", "from_endpoint"}}, s.bytes_from_endpoints);
  auto& proxy_failures = prometheus::BuildCounter()
                             .Name("konn_agent_egress_proxy_failures_total")
                             .Help(
                                 "Connection attempts through the egress HTTP proxy that failed, "
                                 "by what the proxy did: auth (407/401), refused (other status), "
                                 "server_unreachable (502-504), proxy_unreachable, timeout, other")
                             .Register(r);
  for (int i = 0; i < ProxyFailure::kReasons; ++i) {
    counter(proxy_failures, {{"reason", ProxyFailure::kReasonNames[i]}},
            s.egress_proxy_failures[i]);
  }
  auto& refused = prometheus::BuildCounter()
                      .Name("konn_agent_dials_refused_total")
                      .Help(
                          "Dials refused before connecting: destination outside "
                          "--allowed-destinations, or a protocol other than tcp")
                      .Register(r);
  for (int i = 0; i < AgentStats::kRefusedDialReasons; ++i) {
    counter(refused, {{"reason", AgentStats::kRefusedDialNames[i]}}, s.dials_refused[i]);
  }
  auto& limits = prometheus::BuildCounter()
                     .Name("konn_agent_limits_hit_total")
                     .Help("Dials refused by a limit, by limit")
                     .Register(r);
  for (int i = 0; i < AgentStats::kLimits; ++i) {
    counter(limits, {{"limit", AgentStats::kLimitNames[i]}}, s.limits_hit[i]);
  }
  if (node_stats_) {
    // Node to control plane: connections accepted on --node-to-control-plane-listen.
    const AgentStats& n = *node_stats_;
    gauge("konn_agent_node_connections",
          "Open node-to-control-plane connections (accepted, tunnelled to a proxy-server)",
          n.open_endpoint_connections);
    own("node_dials_total", "Node-to-control-plane connections accepted and sent to a server", {},
        n.dials);
    auto& node_failures = prometheus::BuildCounter()
                              .Name("konn_agent_node_dial_failures_total")
                              .Help(
                                  "Node-to-control-plane connections closed before their tunnel "
                                  "opened, by reason: the server's dial failed or was refused "
                                  "(server_error), no server confirmed the extension "
                                  "(no_server), --max-node-to-control-plane-connections (limit), "
                                  "no answer within 30s (timeout)")
                              .Register(r);
    counter(node_failures, {{"reason", "server_error"}}, n.dial_failures);
    counter(node_failures, {{"reason", "no_server"}}, n.no_server_refusals);
    counter(node_failures, {{"reason", "timeout"}}, n.dial_timeouts);
    counter(node_failures, {{"reason", "limit"}},
            n.limits_hit[AgentStats::LimitEndpointConnections]);
    auto& node_bytes = prometheus::BuildCounter()
                           .Name("konn_agent_node_bytes_total")
                           .Help("Node-to-control-plane bytes relayed, by direction")
                           .Register(r);
    counter(node_bytes, {{"direction", "to_node"}}, n.bytes_to_endpoints);
    counter(node_bytes, {{"direction", "from_node"}}, n.bytes_from_endpoints);
    own("node_half_close_timeouts_total",
        "Node-to-control-plane connections closed by --half-close-timeout", {},
        n.half_close_timeouts);
    own("node_queue_overflow_total",
        "Node-to-control-plane connections closed alone because their write queue passed its cap",
        {}, n.queue_overflow_closes);
  }
}

void AgentMetrics::lease_list(int http_status, const std::string& reason, double seconds) {
  std::string code = std::to_string(http_status);
  lease_lists_->Add({{"http_response_code", code}, {"reason", reason}}).Increment();
  lease_list_latency_->Add({{"http_response_code", code}}, latency_buckets()).Observe(seconds);
}

void AgentMetrics::lease_watch(int http_status, const std::string& reason) {
  lease_watches_->Add({{"http_response_code", std::to_string(http_status)}, {"reason", reason}})
      .Increment();
}

std::string AgentMetrics::serialize() {
  std::lock_guard lock(mu_);
  for (auto& g : gauges_) {
    g.target->Set(static_cast<double>(g.source->load(std::memory_order_relaxed)));
  }
  for (auto& c : counters_) {
    uint64_t now = c.source->load(std::memory_order_relaxed);
    if (now > c.seen) c.target->Increment(static_cast<double>(now - c.seen));
    c.seen = now;
  }
  // The histogram takes what was observed since the last scrape, bucket by bucket.
  std::vector<double> increments(stats_->dial_duration_buckets.size());
  bool observed = false;
  for (size_t i = 0; i < increments.size(); ++i) {
    uint64_t now = stats_->dial_duration_buckets[i].load(std::memory_order_relaxed);
    increments[i] = static_cast<double>(now - dial_buckets_seen_[i]);
    observed = observed || now != dial_buckets_seen_[i];
    dial_buckets_seen_[i] = now;
  }
  uint64_t nanos = stats_->dial_duration_nanos.load(std::memory_order_relaxed);
  if (observed) {
    dial_duration_->ObserveMultiple(increments,
                                    static_cast<double>(nanos - dial_nanos_seen_) / 1e9);
  }
  dial_nanos_seen_ = nanos;
  for (const auto& [key, count] : stats_->stream_errors_snapshot()) {
    uint64_t& seen = stream_errors_seen_[key];
    if (count > seen) {
      const auto& [segment, code, type] = key;
      stream_errors_->Add({{"segment", segment}, {"code", code}, {"packet_type", type}})
          .Increment(static_cast<double>(count - seen));
      seen = count;
    }
  }
  return registry_.serialize();
}

}  // namespace konn::agent
