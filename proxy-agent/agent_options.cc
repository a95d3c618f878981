#include "proxy-agent/agent_options.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <optional>

#include <spdlog/fmt/ranges.h>

#include "core/config/log_flags.h"
#include "core/config/uuid.h"
#include "core/config/validation.h"
#include "core/kube/api_client.h"
#include "core/net/url_escape.h"

namespace konn::agent {
namespace {

using core::config::format_go_duration;

bool is_ipv4(const std::string& s) {
  in_addr a{};
  return inet_pton(AF_INET, s.c_str(), &a) == 1;
}

bool is_ipv6(const std::string& s) {
  in6_addr a{};
  return inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

bool is_cidr(const std::string& s) {
  auto slash = s.find('/');
  if (slash == std::string::npos) return false;
  std::string ip = s.substr(0, slash);
  std::string bits = s.substr(slash + 1);
  int n = -1;
  auto [ptr, ec] = std::from_chars(bits.data(), bits.data() + bits.size(), n);
  if (ec != std::errc() || ptr != bits.data() + bits.size() || bits.empty()) return false;
  if (is_ipv4(ip)) return n >= 0 && n <= 32;
  if (is_ipv6(ip)) return n >= 0 && n <= 128;
  return false;
}

bool is_go_bool(const std::string& s) {
  for (const char* b :
       {"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}) {
    if (s == b) return true;
  }
  return false;
}

bool valid_log_level(const std::string& level) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(level.data(), level.data() + level.size(), v);
  if (!level.empty() && ec == std::errc() && ptr == level.data() + level.size()) return v >= 0;
  for (const char* name :
       {"trace", "debug", "info", "warn", "warning", "error", "err", "critical", "off"}) {
    if (level == name) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> validate_agent_identifiers(const std::string& query,
                                                    std::vector<std::string>* warnings) {
  std::vector<std::string> errors;
  // A value upstream accepts though it does not parse: sent as it is, with a warning.
  std::vector<std::string> ignored;
  std::vector<std::string>& odd = warnings != nullptr ? *warnings : ignored;
  if (query.empty()) return errors;
  const std::string flag = "--agent-identifiers: ";
  const std::string kAsString = ": sent as is, it matches a dial to that exact host only";
  size_t start = 0;
  while (start <= query.size()) {
    size_t amp = query.find('&', start);
    if (amp == std::string::npos) amp = query.size();
    std::string_view part(query.data() + start, amp - start);
    start = amp + 1;
    if (part.empty()) continue;
    if (part.find(';') != std::string_view::npos) {
      errors.push_back(flag + "invalid semicolon separator in query");
      continue;
    }
    auto eq = part.find('=');
    auto key = core::net::url_unescape(part.substr(0, eq), core::net::UrlPart::QueryComponent);
    auto value = core::net::url_unescape(
        eq == std::string_view::npos ? std::string_view{} : part.substr(eq + 1),
        core::net::UrlPart::QueryComponent);
    if (!key || !value) {
      errors.push_back(flag + "invalid URL escape in \"" + std::string(part) + "\"");
      continue;
    }
    if (*key == "ipv4") {
      if (!is_ipv4(*value))
        odd.push_back(flag + "ipv4 \"" + *value + "\" is not an IPv4 address" + kAsString);
    } else if (*key == "ipv6") {
      if (!is_ipv6(*value))
        odd.push_back(flag + "ipv6 \"" + *value + "\" is not an IPv6 address" + kAsString);
    } else if (*key == "cidr") {
      if (!is_cidr(*value)) {
        odd.push_back(flag + "cidr \"" + *value + "\" is not a CIDR block: it matches no dial");
      }
    } else if (*key == "host") {
      if (value->empty()) odd.push_back(flag + "an empty host matches no dial");
    } else if (*key == "default-route") {
      if (!is_go_bool(*value)) {
        odd.push_back(flag + "default-route \"" + *value +
                      "\" is not a boolean: the agent is not a default route");
      }
    } else {
      errors.push_back(flag + "unknown address type: " + *key +
                       " (want ipv4, ipv6, host, cidr, default-route)");
    }
  }
  return errors;
}

void AgentOptions::register_flags(core::config::FlagParser& p) {
  p.add("proxy-server-host", &proxy_server_hosts,
        "Proxy-server host; a comma-separated list spreads connection attempts over several");
  p.add("proxy-server-port", &proxy_server_port, "Proxy-server agent port");
  p.add("proxy-url", &proxy_url,
        "HTTP proxy to reach every proxy-server through (CONNECT), http://[user:pass@]host:port "
        "(port 80 if absent); empty: HTTPS_PROXY/https_proxy and NO_PROXY/no_proxy as in Go");
  p.add("ca-cert", &ca_cert, "CA that signs the proxy-server certificate (empty: system roots)");
  p.add("agent-cert", &agent_cert, "Client certificate presented to the proxy-server (mTLS)");
  p.add("agent-key", &agent_key, "Key of --agent-cert");
  p.add("alpn-proto", &alpn_protos,
        "ALPN ids offered to the proxy-servers, in this order, then h2 unless listed (the "
        "server must pick h2); tells apart proxy and apiserver connections that share an "
        "address");
  p.add("agent-id", &agent_id, "Agent id sent to the server");
  p.set_default_text("agent-id", "$PROXY_AGENT_ID or a random UUID");
  p.add("agent-identifiers", &agent_identifiers,
        "Identifiers as a URL query, e.g. host=node1&ipv4=10.0.0.5&default-route=true");
  p.add("service-account-token-path", &service_account_token_path,
        "File whose contents are sent as 'authorization: Bearer <token>' at every connect");
  p.add("sync-interval", &sync_interval, "Interval of the connect loop (and first backoff)");
  p.add("sync-interval-cap", &sync_interval_cap, "Maximum backoff of the connect loop");
  p.add("probe-interval", &probe_interval, "How often each server connection's state is checked");
  p.add("sync-forever", &sync_forever,
        "Keep dialing every sync interval even when connected to every server");
  p.add("keepalive-time", &keepalive_time, "gRPC keepalive ping interval (at least 30s is used)");
  p.add("server-connect-timeout", &server_connect_timeout,
        "Bound of one connection attempt to a proxy-server: TCP connect, the egress proxy's "
        "CONNECT answer and the TLS handshake (at least 100ms)");
  p.add("drain-timeout", &drain_timeout,
        "konn: after the first SIGTERM or SIGINT (DRAIN sent to every server; the agent keeps "
        "serving, a fallback for the servers when every agent drains), exit once this long has "
        "passed. 0: only a second signal ends the drain, as upstream");
  p.add("xfr-channel-size", &xfr_channel_size,
        "Per-connection queue depth in packets (kept for compatibility; must be > 0)");
  p.add("dial-timeout", &dial_timeout, "Timeout of each dial to an endpoint");
  p.add("allowed-destinations", &allowed_destinations,
        "Where dials may go: rules [!]<ip|cidr|*>[:port[-port]] (IPv6 with a port in brackets), "
        "checked on every resolved address; allowed when an allow rule covers it and no ! rule "
        "does; * allows everything. The default is everything but the metadata addresses");
  p.add("max-endpoint-connections", &max_endpoint_connections,
        "Endpoint connections (dialling or open) at once; more dials are refused (0: no limit)");
  p.add("half-close-timeout", &half_close_timeout,
        "Close an endpoint connection whose one side finished sending (half-close) once nothing "
        "moved for this long");
  p.add("node-to-control-plane-listen", &node_to_control_plane_listen,
        "konn, node to control plane: ADDR:PORT (repeatable) where node-side clients connect; "
        "each connection is tunnelled to a proxy-server, which dials its first "
        "--node-to-control-plane-destinations (or the HOST:PORT given as ADDR:PORT=HOST:PORT)");
  p.add("max-node-to-control-plane-connections", &max_node_to_control_plane_connections,
        "Node-to-control-plane connections (asking or open) at once; more are closed when "
        "accepted (0: no limit)");
  p.add("warn-on-channel-limit", &warn_on_channel_limit, "Accepted for compatibility");
  p.add("count-server-leases", &count_server_leases,
        "Count the proxy-servers' valid Leases to know how many servers to connect to");
  p.add("lease-namespace", &lease_namespace,
        "Namespace of the proxy-server Leases (empty: every namespace, with a warning)");
  p.add("lease-label-selector", &lease_label_selector, "Label selector of proxy-server Leases");
  p.add("lease-label", &lease_label_selector, "Deprecated alias of --lease-label-selector");
  p.add("server-count-source", &server_count_source,
        "default (or empty): the lease count when counting leases, else the servers' "
        "servercount; max: the larger of both");
  p.add("lease-poll-interval", &lease_poll_interval,
        "konn: with --count-server-leases the Leases are watched; while no watch runs, they "
        "are listed again at most this far apart (backoff from 1s)");
  p.add("kubeconfig", &kubeconfig, "kubeconfig for the Lease list (empty: in-cluster)");
  p.add("kube-api-content-type", &kube_api_content_type,
        "Content type upstream asks the apiserver for; konn's Lease list always uses "
        "application/json, and a warning says so when another one is set");
  p.add("health-server-host", &health_server_host,
        "Bind address of /healthz, /readyz and /metrics (empty: all interfaces)");
  p.add("health-server-port", &health_server_port, "Port of the health listener (0: any)");
  p.add("admin-bind-address", &admin_bind_address,
        "Bind address of the admin listener (/metrics, and /status and /status.json: the "
        "servers, tunnels, refused dials and certificates)");
  p.add("status-page-off-loopback", &status_page_off_loopback,
        "Serve /status and /status.json also when --admin-bind-address is not a loopback "
        "address (they show no tokens or keys); off, they answer 403 there");
  p.add("admin-server-port", &admin_server_port, "Port of the admin listener (0: any)");
  p.add("enable-profiling", &enable_profiling,
        "Serve a CPU profile, heap statistics and an index under /debug/pprof/ on the admin "
        "port (konn's own formats, not Go's pprof: see the README)");
  p.add("enable-contention-profiling", &enable_contention_profiling,
        "Accepted with --enable-profiling; konn has no lock-contention profile: it warns at "
        "start and /debug/pprof/block and /debug/pprof/mutex answer 501");
  // klog flags that upstream manifests pass.
  core::config::register_log_flags(p, &log_level, &log_file);
}

std::optional<NodeListen> parse_node_listen(const std::string& text, std::string* error) {
  auto eq = text.find('=');
  std::string listen = text.substr(0, eq);
  NodeListen out;
  auto hp = core::net::parse_host_port(listen);
  if (!hp || hp->host.empty()) {
    *error = "\"" + listen + "\" is not ADDR:PORT";
    return std::nullopt;
  }
  out.listen = *hp;
  if (eq != std::string::npos) {
    out.destination = text.substr(eq + 1);
    auto dest = core::net::parse_host_port(out.destination);
    if (!dest || dest->host.empty() || dest->port == 0) {
      *error = "destination \"" + out.destination + "\" is not HOST:PORT";
      return std::nullopt;
    }
  }
  return out;
}

void AgentOptions::apply_environment() {
  if (agent_id.empty()) {
    const char* env = std::getenv("PROXY_AGENT_ID");
    agent_id = (env != nullptr && *env != '\0') ? env : core::config::make_uuid_v4();
  }
  proxy_env = ProxyEnvironment::from_process();
}

std::vector<std::string> AgentOptions::validate() const {
  std::vector<std::string> errors;
  if (proxy_server_hosts.empty()) errors.push_back("--proxy-server-host: at least one host");
  for (const auto& h : proxy_server_hosts) {
    if (h.find_first_of(" /") != std::string::npos) {
      errors.push_back("--proxy-server-host: \"" + h + "\" is not a host name or address");
    }
  }
  core::config::check_range(errors, "--proxy-server-port", proxy_server_port, 1, 65535);
  std::string proxy_error;
  if (!EgressProxyConfig::resolve(proxy_url, proxy_env, &proxy_error)) {
    errors.push_back(proxy_error);
  }
  if (agent_cert.empty() != agent_key.empty()) {
    errors.push_back("--agent-cert and --agent-key: set both or neither");
  }
  if (agent_id.empty()) errors.push_back("--agent-id: must not be empty");
  for (const auto& id : alpn_protos) {
    // Go's client refuses the same lists at every handshake: an agent that could never connect.
    if (id.empty() || id.size() > 255) {
      errors.push_back("--alpn-proto: \"" + id + "\" is not an ALPN id (1 to 255 bytes)");
    }
  }
  for (auto& e : validate_agent_identifiers(agent_identifiers)) errors.push_back(std::move(e));
  if (sync_interval.count() <= 0) errors.push_back("--sync-interval: must be positive");
  if (sync_interval_cap < sync_interval) {
    errors.push_back("--sync-interval-cap: must be at least --sync-interval (" +
                     format_go_duration(sync_interval) + "), got " +
                     format_go_duration(sync_interval_cap));
  }
  if (probe_interval.count() <= 0) errors.push_back("--probe-interval: must be positive");
  if (server_connect_timeout < std::chrono::milliseconds(100)) {
    errors.push_back("--server-connect-timeout: must be at least 100ms");
  }
  if (drain_timeout.count() < 0) {
    errors.push_back("--drain-timeout: must be 0 (until a second signal) or positive");
  }
  if (xfr_channel_size <= 0) errors.push_back("--xfr-channel-size: must be greater than 0");
  if (dial_timeout.count() <= 0) errors.push_back("--dial-timeout: must be positive");
  if (half_close_timeout.count() <= 0) {
    errors.push_back("--half-close-timeout: must be positive");
  }
  std::string policy_error;
  if (!core::net::DestinationPolicy::parse(allowed_destinations, &policy_error)) {
    errors.push_back("--allowed-destinations: " + policy_error);
  }
  if (max_endpoint_connections < 0) {
    errors.push_back("--max-endpoint-connections: must be 0 (no limit) or positive");
  }
  for (const auto& l : node_to_control_plane_listen) {
    std::string why;
    if (!parse_node_listen(l, &why)) errors.push_back("--node-to-control-plane-listen: " + why);
  }
  if (max_node_to_control_plane_connections < 0) {
    errors.push_back("--max-node-to-control-plane-connections: must be 0 (no limit) or positive");
  }
  if (!server_count_source.empty() && server_count_source != "default" &&
      server_count_source != "max") {
    errors.push_back("--server-count-source: must be default, max or empty (default), got \"" +
                     server_count_source + "\"");
  }
  if (count_server_leases) {
    if (lease_label_selector.empty()) {
      errors.push_back("--lease-label-selector: must not be empty with --count-server-leases");
    }
  }
  if (lease_poll_interval < std::chrono::seconds(1)) {
    errors.push_back("--lease-poll-interval: must be at least 1s");
  }
  core::config::check_range(errors, "--health-server-port", health_server_port, 0, 65535);
  core::config::check_range(errors, "--admin-server-port", admin_server_port, 0, 65535);
  if (!valid_log_level(log_level)) {
    errors.push_back("--v: \"" + log_level + "\" is neither a klog level nor a level name");
  }
  if (enable_contention_profiling && !enable_profiling) {
    errors.push_back("--enable-contention-profiling: needs --enable-profiling too (as upstream)");
  }
  return errors;
}

void AgentOptions::print(spdlog::logger& log) const {
  log.info(
      "proxy-agent starting: agent-id={} identifiers=\"{}\" servers={}:{} mTLS={} token={} "
      "sync-interval={} sync-interval-cap={} probe-interval={} sync-forever={} "
      "keepalive-time={} server-connect-timeout={} dial-timeout={} drain-timeout={}",
      agent_id, agent_identifiers, fmt::join(proxy_server_hosts, ","), proxy_server_port,
      !agent_cert.empty(), service_account_token_path.empty() ? "none" : "from file",
      format_go_duration(sync_interval), format_go_duration(sync_interval_cap),
      format_go_duration(probe_interval), sync_forever, format_go_duration(keepalive_time),
      format_go_duration(server_connect_timeout), format_go_duration(dial_timeout),
      format_go_duration(drain_timeout));
  log.info(
      "dials allowed to {}; at most {} endpoint connections (0: no limit); half-close-timeout={}",
      fmt::join(allowed_destinations, ","), max_endpoint_connections,
      format_go_duration(half_close_timeout));
  log.info("egress HTTP proxy towards the proxy-servers: {}", egress_proxy().describe());
  if (!node_to_control_plane_listen.empty()) {
    log.info("node to control plane: listening on {}; at most {} connections (0: no limit)",
             fmt::join(node_to_control_plane_listen, ","), max_node_to_control_plane_connections);
  }
  if (!alpn_protos.empty()) {
    log.info("ALPN offered to the proxy-servers: {}", fmt::join(alpn_offered(), ","));
  }
  for (const auto& w : warnings()) log.warn("{}", w);
  if (count_server_leases) {
    log.info(
        "server count from Leases {} in {}, watched (listed every {} at most while no "
        "watch runs; server-count-source={})",
        lease_label_selector, lease_namespace, format_go_duration(lease_poll_interval),
        server_count_source);
  }
}

std::vector<std::string> AgentOptions::alpn_offered() const {
  if (alpn_protos.empty()) return {};
  std::vector<std::string> out = alpn_protos;
  if (std::find(out.begin(), out.end(), "h2") == out.end()) out.push_back("h2");
  return out;
}

std::vector<std::string> AgentOptions::warnings() const {
  std::vector<std::string> out;
  if (keepalive_time.count() <= 0) {
    out.push_back("--keepalive-time=" + format_go_duration(keepalive_time) +
                  ": pings every 30s, konn's floor (upstream's gRPC client raises it to 10s)");
  }
  validate_agent_identifiers(agent_identifiers, &out);
  if (count_server_leases && lease_namespace.empty()) {
    out.push_back(
        "--lease-namespace is empty: the Leases of every namespace are counted (upstream's "
        "meaning); the agent's account needs to list Leases cluster-wide");
  }
  if (auto w = core::kube::content_type_warning(kube_api_content_type, count_server_leases);
      !w.empty()) {
    out.push_back(w);
  }
  return out;
}

EgressProxyConfig AgentOptions::egress_proxy() const {
  std::string error;
  auto c = EgressProxyConfig::resolve(proxy_url, proxy_env, &error);
  return c ? *c : EgressProxyConfig{};
}

}  // namespace konn::agent
