#include "proxy-agent/agent_status.h"

#include <algorithm>

#include "core/admin/status_page.h"
#include "core/admin/top_n.h"
#include "core/config/duration.h"
#include "core/net/url_escape.h"

#ifndef KONN_VERSION
#define KONN_VERSION "unknown"
#endif

namespace konn::agent {
namespace {

using json = nlohmann::ordered_json;
using core::admin::rfc3339;

uint64_t relaxed(const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); }
int64_t relaxed(const std::atomic<int64_t>& v) { return v.load(std::memory_order_relaxed); }

}  // namespace

AgentStatus::AgentStatus(const AgentOptions& options, const ServerSet& servers,
                         std::shared_ptr<const AgentStats> stats,
                         const core::admin::CertificateGauges& certificates)
    : options_(options), servers_(servers), stats_(std::move(stats)), certificates_(certificates) {}

json AgentStatus::build(const std::string& query) const {
  const auto q = core::admin::parse_query(query);
  const auto top_n = static_cast<size_t>(core::admin::query_int(q, "tunnels", 20, 0, 200));
  const auto now = std::chrono::steady_clock::now();
  const auto wall = std::chrono::system_clock::now();
  const auto& s = *stats_;
  auto set = servers_.status();

  json servers = json::array();
  size_t connected = 0;
  size_t tunnels = 0;
  for (const auto& row : set.servers) {
    json j{{"server_id", row.server_id}, {"target", row.target}, {"connected", row.connected}};
    j["since"] = row.connected ? rfc3339(row.since) : "";
    j["draining"] = row.connected && set.draining;
    j["tunnels"] = row.tunnels;
    j["node_tunnels"] = row.node_tunnels;
    j["flow_control"] = row.connected ? (row.flow_control ? "konn-credit" : "none") : "";
    j["last_error"] = row.last_error;
    j["last_error_at"] = row.last_error.empty() ? "" : rfc3339(row.last_error_at);
    servers.push_back(std::move(j));
    if (row.connected) {
      ++connected;
      tunnels += row.tunnels;
    }
  }

  // The longest-lived and the busiest endpoint connections, top_n of each.
  using Row = ServerSet::TunnelRow;
  auto bytes = [](const Row& r) {
    return r.status.bytes_from_endpoint + r.status.bytes_to_endpoint;
  };
  auto by_age = core::admin::best_of(set.tunnels, top_n, [](const Row& a, const Row& b) {
    return a.status.started < b.status.started;
  });
  auto by_bytes = core::admin::best_of(
      set.tunnels, top_n, [&bytes](const Row& a, const Row& b) { return bytes(a) > bytes(b); });
  auto rows = [now](const std::vector<const Row*>& list) {
    json out = json::array();
    for (const Row* r : list) {
      out.push_back(
          {{"server_id", r->server_id},
           {"destination", r->status.destination},
           {"age_seconds", std::chrono::duration<double>(now - r->status.started).count()},
           {"bytes_from_endpoint", r->status.bytes_from_endpoint},
           {"bytes_to_endpoint", r->status.bytes_to_endpoint}});
    }
    return out;
  };

  json refused = json::array();
  auto recent = s.refusals.snapshot();
  for (auto it = recent.rbegin(); it != recent.rend(); ++it) {
    refused.push_back({{"at", rfc3339(it->at)},
                       {"reason", it->reason},
                       {"destination", it->destination},
                       {"error", it->error}});
  }
  json counts = json::object();
  for (size_t i = 0; i < AgentStats::kRefusedDialReasons; ++i) {
    counts[AgentStats::kRefusedDialNames[i]] = relaxed(s.dials_refused[i]);
  }
  for (size_t i = 0; i < AgentStats::kLimits; ++i) {
    counts[AgentStats::kLimitNames[i]] = relaxed(s.limits_hit[i]);
  }
  counts["dial_failed"] = relaxed(s.dial_failures);
  counts["dial_timeout"] = relaxed(s.dial_timeouts);

  json events = json::array();
  for (auto it = set.recent.rbegin(); it != set.recent.rend(); ++it) {
    events.push_back({{"at", rfc3339(it->at)},
                      {"target", it->target},
                      {"server_id", it->server_id},
                      {"what", it->what}});
  }

  json certs = json::array();
  for (const auto& c : certificates_.entries()) {
    json e{{"listener", c.listener}, {"kind", c.kind}, {"path", c.path}, {"subject", c.subject}};
    if (c.not_after) {
      e["not_after"] = rfc3339(*c.not_after);
      e["expires_in_seconds"] = std::chrono::duration<double>(*c.not_after - wall).count();
    }
    e["error"] = c.error;
    certs.push_back(std::move(e));
  }

  const int64_t slots = relaxed(s.endpoint_slots);
  using core::config::format_go_duration;
  json out;
  out["generated_at"] = rfc3339(wall);
  out["summary"] = {{"daemon", "proxy-agent"},
                    {"version", KONN_VERSION},
                    {"agent_id", options_.agent_id},
                    {"identifiers", options_.agent_identifiers},
                    {"started_at", rfc3339(started_)},
                    {"draining", set.draining},
                    {"servers_connected", connected},
                    {"servers_wanted", set.server_count},
                    {"open_endpoint_connections", relaxed(s.open_endpoint_connections)},
                    {"dials_total", relaxed(s.dials)}};
  out["servers"] = std::move(servers);
  out["tunnels"] = {{"open", tunnels},
                    {"endpoint_connections", relaxed(s.open_endpoint_connections)},
                    {"half_closed", relaxed(s.half_closed_endpoint_connections)},
                    {"bytes_to_endpoints", relaxed(s.bytes_to_endpoints)},
                    {"bytes_from_endpoints", relaxed(s.bytes_from_endpoints)},
                    {"closed_over_cap", relaxed(s.queue_overflow_closes)},
                    {"top", top_n},
                    {"longest_lived", rows(by_age)},
                    {"busiest", rows(by_bytes)}};
  out["refusals"] = {{"counts", std::move(counts)},
                     {"kept", AgentStats::kRefusalsKept},
                     {"recent", std::move(refused)}};
  out["server_events"] = std::move(events);
  json limit{{"flag", "--max-endpoint-connections"},
             {"limit", options_.max_endpoint_connections},
             {"used", slots}};
  limit["ratio"] = options_.max_endpoint_connections > 0
                       ? static_cast<double>(slots) / options_.max_endpoint_connections
                       : 0.0;
  out["limits"] = json::array({std::move(limit)});
  out["certificates"] = std::move(certs);
  // Settings only: file paths, never their contents; the proxy URL without its credentials.
  out["flags"] = {{"proxy-server-host", options_.proxy_server_hosts},
                  {"proxy-server-port", options_.proxy_server_port},
                  {"proxy-url", core::net::redact_url_credentials(options_.proxy_url)},
                  {"ca-cert", options_.ca_cert},
                  {"agent-cert", options_.agent_cert},
                  {"service-account-token-path", options_.service_account_token_path},
                  {"sync-interval", format_go_duration(options_.sync_interval)},
                  {"sync-interval-cap", format_go_duration(options_.sync_interval_cap)},
                  {"probe-interval", format_go_duration(options_.probe_interval)},
                  {"sync-forever", options_.sync_forever},
                  {"keepalive-time", format_go_duration(options_.keepalive_time)},
                  {"xfr-channel-size", options_.xfr_channel_size},
                  {"dial-timeout", format_go_duration(options_.dial_timeout)},
                  {"allowed-destinations", options_.allowed_destinations},
                  {"half-close-timeout", format_go_duration(options_.half_close_timeout)},
                  {"node-to-control-plane-listen", options_.node_to_control_plane_listen},
                  {"count-server-leases", options_.count_server_leases},
                  {"server-count-source", options_.server_count_source},
                  {"admin-bind-address", options_.admin_bind_address},
                  {"admin-server-port", options_.admin_server_port}};
  return out;
}

}  // namespace konn::agent
