#include "proxy-server/status/server_status.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "core/admin/status_page.h"
#include "core/admin/top_n.h"
#include "core/config/duration.h"
#include "proxy-server/backend/backend.h"
#include "proxy-server/tunnel/frontend.h"
#include "proxy-server/tunnel/router.h"

#ifndef KONN_VERSION
#define KONN_VERSION "unknown"
#endif

namespace konn::server {
namespace {

using json = nlohmann::ordered_json;
using core::admin::rfc3339;

std::string join_identifiers(const core::tunnel::AgentIdentifiers& ids) {
  std::string out;
  auto add = [&out](const char* key, const std::vector<std::string>& values) {
    for (const auto& v : values) out += (out.empty() ? "" : "&") + std::string(key) + "=" + v;
  };
  add("host", ids.hosts);
  add("ipv4", ids.ipv4);
  add("ipv6", ids.ipv6);
  add("cidr", ids.cidrs);
  if (ids.default_route) out += (out.empty() ? "" : "&") + std::string("default-route=true");
  return out;
}

double seconds_between(std::chrono::steady_clock::time_point from,
                       std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

json limit_row(const std::string& flag, int64_t limit, int64_t used) {
  json j{{"flag", flag}, {"limit", limit}, {"used", used}};
  j["ratio"] = limit > 0 ? static_cast<double>(used) / static_cast<double>(limit) : 0.0;
  return j;
}

struct TunnelRow {
  std::string agent;
  int64_t connect_id;
  TunnelStatus status;
};

json tunnel_json(const TunnelRow& t, std::chrono::steady_clock::time_point now) {
  return {{"agent", t.agent},
          {"connect_id", t.connect_id},
          {"frontend", t.status.kind},
          {"destination", t.status.destination},
          {"age_seconds", seconds_between(t.status.started, now)},
          {"bytes_from_client", t.status.bytes_from_client},
          {"bytes_to_client", t.status.bytes_to_client},
          {"state", t.status.half_closed ? "half-closed" : "established"}};
}

}  // namespace

ServerStatus::ServerStatus(Router& router, const ServerOptions& options,
                           const core::admin::CertificateGauges& certificates,
                           std::function<bool()> draining)
    : router_(router),
      options_(options),
      certificates_(certificates),
      draining_(std::move(draining)) {}

json ServerStatus::build(const std::string& query) const {
  auto q = core::admin::parse_query(query);
  const int64_t offset = core::admin::query_int(q, "agents_offset", 0, 0, INT32_MAX);
  const int64_t page = core::admin::query_int(q, "agents_limit", 100, 1, 1000);
  const auto top_n = static_cast<size_t>(core::admin::query_int(q, "tunnels", 20, 0, 200));
  const auto now = std::chrono::steady_clock::now();
  const auto wall = std::chrono::system_clock::now();

  // One pass over every agent stream: counts for the summary and the limits, and the tunnels
  // for the top lists. Each table is locked only to copy it.
  auto backends = router_.backends().all();
  std::sort(backends.begin(), backends.end(), [](const auto& a, const auto& b) {
    if (a->agent_id() != b->agent_id()) return a->agent_id() < b->agent_id();
    return a->connected_at() < b->connected_at();
  });
  size_t tunnels_total = 0;
  size_t most_tunnels = 0;
  size_t most_pending = 0;
  auto older = [](const TunnelRow& a, const TunnelRow& b) {
    return a.status.started < b.status.started;
  };
  auto busier = [](const TunnelRow& a, const TunnelRow& b) {
    return a.status.bytes_from_client + a.status.bytes_to_client >
           b.status.bytes_from_client + b.status.bytes_to_client;
  };
  core::admin::TopN<TunnelRow, decltype(older)> oldest_kept(top_n, older);
  core::admin::TopN<TunnelRow, decltype(busier)> busiest_kept(top_n, busier);
  for (const auto& b : backends) {
    auto tunnels = b->tunnels();
    const size_t pending = router_.pending().size_of(b.get());
    tunnels_total += tunnels.size();
    most_tunnels = std::max(most_tunnels, tunnels.size() + pending);
    most_pending = std::max(most_pending, pending);
    for (const auto& [id, frontend] : tunnels) {
      TunnelRow row{b->agent_id(), id, frontend->status()};
      oldest_kept.offer(row);
      busiest_kept.offer(row);
    }
  }
  const auto oldest = std::move(oldest_kept).sorted();
  const auto busiest = std::move(busiest_kept).sorted();

  json agents = json::array();
  for (size_t i = static_cast<size_t>(offset);
       i < backends.size() && i < static_cast<size_t>(offset + page); ++i) {
    const auto& b = backends[i];
    agents.push_back(
        {{"id", b->agent_id()},
         {"identifiers", join_identifiers(b->identifiers())},
         {"peer", b->peer()},
         {"connected_since", rfc3339(b->connected_at())},
         {"connected_seconds", std::chrono::duration<double>(wall - b->connected_at()).count()},
         {"draining", b->draining()},
         {"open_tunnels", b->connection_count()},
         {"pending_dials", router_.pending().size_of(b.get())},
         {"bytes_from_agent", b->bytes_from_agent()},
         {"bytes_to_agent", b->bytes_to_agent()},
         {"flow_control", b->flow_control() ? "konn-credit" : "none (upstream agent)"},
         {"half_close", b->half_close()},
         {"last_error", b->last_error()}});
  }

  json oldest_j = json::array();
  for (const auto& t : oldest) oldest_j.push_back(tunnel_json(t, now));
  json busiest_j = json::array();
  for (const auto& t : busiest) busiest_j.push_back(tunnel_json(t, now));

  json failures = json::array();
  auto recent = router_.dial_failures().snapshot();
  for (auto it = recent.rbegin(); it != recent.rend(); ++it) {
    failures.push_back({{"at", rfc3339(it->at)},
                        {"reason", it->reason},
                        {"agent", it->agent},
                        {"destination", it->destination},
                        {"error", it->error}});
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

  const auto pending_total = router_.pending().size();
  using core::config::format_go_duration;
  json out;
  out["generated_at"] = rfc3339(wall);
  out["summary"] = {{"daemon", "proxy-server"},
                    {"version", KONN_VERSION},
                    {"server_id", options_.server_id},
                    {"started_at", rfc3339(started_)},
                    {"draining", draining_ ? draining_() : false},
                    {"ready", router_.backends().ready()},
                    {"agent_streams", backends.size()},
                    {"agents", router_.backends().agent_count()},
                    {"established_tunnels", tunnels_total},
                    {"pending_dials", pending_total},
                    {"frontend_streams", router_.frontends_in_use()},
                    {"dial_failures_total", router_.dial_failures().total()}};
  out["agents"] = {{"total", backends.size()},
                   {"offset", offset},
                   {"limit", page},
                   {"items", std::move(agents)}};
  out["tunnels"] = {{"total", tunnels_total},
                    {"top", top_n},
                    {"longest_lived", std::move(oldest_j)},
                    {"busiest", std::move(busiest_j)}};
  out["dial_failures"] = {{"total", router_.dial_failures().total()},
                          {"kept", router_.dial_failures().capacity()},
                          {"recent", std::move(failures)}};
  out["limits"] =
      json::array({limit_row("--max-frontend-streams", options_.max_frontend_streams,
                             router_.frontends_in_use()),
                   limit_row("--max-pending-dials", options_.max_pending_dials,
                             static_cast<int64_t>(pending_total)),
                   limit_row("--max-pending-dials-per-agent", options_.max_pending_dials_per_agent,
                             static_cast<int64_t>(most_pending)),
                   limit_row("--max-tunnels-per-agent", options_.max_tunnels_per_agent,
                             static_cast<int64_t>(most_tunnels))});
  out["certificates"] = std::move(certs);
  // Settings only: file paths, never file contents, tokens or keys.
  out["flags"] = {
      {"mode", options_.mode},
      {"uds-name", options_.uds_name},
      {"server-bind-address", options_.server_bind_address},
      {"server-port", options_.server_port},
      {"agent-bind-address", options_.agent_bind_address},
      {"agent-port", options_.agent_port},
      {"admin-bind-address", options_.admin_bind_address},
      {"admin-port", options_.admin_port},
      {"health-port", options_.health_port},
      {"server-count", options_.server_count},
      {"proxy-strategies", options_.proxy_strategies},
      {"xfr-channel-size", options_.xfr_channel_size},
      {"backend-dial-timeout", format_go_duration(options_.backend_dial_timeout)},
      {"graceful-shutdown-timeout", format_go_duration(options_.graceful_shutdown_timeout)},
      {"half-close-timeout", format_go_duration(options_.half_close_timeout)},
      {"tunnel-idle-timeout", format_go_duration(options_.tunnel_idle_timeout)},
      {"stalled-client-timeout", format_go_duration(options_.stalled_client_timeout)},
      {"http-connect-half-close", options_.http_connect_half_close},
      {"enable-lease-controller", options_.enable_lease_controller},
      {"agent-namespace", options_.agent_namespace},
      {"verify-agent-identifiers", options_.verify_agent_identifiers},
      {"cluster-cert", options_.cluster_cert},
      {"cluster-ca-cert", options_.cluster_ca_cert},
      {"server-cert", options_.server_cert},
      {"server-ca-cert", options_.server_ca_cert},
      {"cert-reload-interval", format_go_duration(options_.cert_reload_interval)},
      {"node-to-control-plane-destinations", options_.node_to_control_plane_destinations}};
  return out;
}

}  // namespace konn::server
