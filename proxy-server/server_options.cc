#include "proxy-server/server_options.h"

#include <algorithm>
#include <cstdlib>

#include <openssl/ssl.h>

#include "core/config/duration.h"
#include "core/config/log_flags.h"
#include "core/config/uuid.h"
#include "core/config/validation.h"
#include "core/kube/api_client.h"
#include "core/kube/lease.h"
#include "core/kube/rate_limiter.h"
#include "core/net/endpoint.h"
#include "core/tls/cipher_suites.h"
#include "core/tunnel/packet.h"
#include "proxy-server/backend/proxy_strategy.h"

namespace konn::server {

using core::config::format_go_duration;

void ServerOptions::register_flags(core::config::FlagParser& p) {
  p.add("mode", &mode, "Frontend protocol: grpc or http-connect");
  p.add("uds-name", &uds_name, "Serve the frontend on this unix socket (plaintext)");
  p.add("delete-existing-uds-file", &delete_existing_uds_file,
        "Remove an existing file at --uds-name before listening");
  p.add("server-port", &server_port, "TCP port of the frontend (0 with --uds-name)");
  p.add("server-bind-address", &server_bind_address, "Bind address of the TCP frontend");
  p.add("server-cert", &server_cert, "Frontend serving certificate (TCP mode)");
  p.add("server-key", &server_key, "Frontend serving key (TCP mode)");
  p.add("server-ca-cert", &server_ca_cert, "CA that signs frontend client certificates (mTLS)");
  p.add("frontend-keepalive-time", &frontend_keepalive_time, "Keepalive ping interval, frontend");
  p.add("agent-port", &agent_port, "Port agents connect to");
  p.add("agent-bind-address", &agent_bind_address, "Bind address of the agent listener");
  p.add("cluster-cert", &cluster_cert, "Certificate served to agents");
  p.add("cluster-key", &cluster_key, "Key of --cluster-cert");
  p.add("cluster-ca-cert", &cluster_ca_cert, "CA for agent client certificates (enables mTLS)");
  p.add("keepalive-time", &keepalive_time, "Keepalive ping interval towards agents");
  p.add("cipher-suites", &cipher_suites,
        "TLS 1.2 cipher suites (Go names) of the agent port and the TCP frontend; TLS 1.3 suites "
        "are accepted and change nothing");
  p.set_default_text("cipher-suites", "the TLS library's secure suites");
  p.add("tls-min-version", &tls_min_version,
        "Minimum TLS version of the agent port and the TCP frontend: VersionTLS12 or "
        "VersionTLS13; VersionTLS10 and VersionTLS11 are accepted with a warning and give "
        "TLS 1.2 (konn never negotiates below it)");
  p.set_default_text("tls-min-version", "VersionTLS12");
  p.add("agent-namespace", &agent_namespace, "Namespace of the agents' service account");
  p.add("agent-service-account", &agent_service_account, "Service account of the agents");
  p.add("authentication-audience", &authentication_audience, "Audience of agent tokens");
  p.add("kubeconfig", &kubeconfig, "kubeconfig for TokenReview and Leases (empty: in-cluster)");
  p.add("verify-agent-identifiers", &verify_agent_identifiers,
        "none: trust agent identifiers as sent (upstream); cert: admit an agent only when its "
        "client certificate proves them (host= a DNS SAN, ipv4=/ipv6= an IP SAN; cidr= and "
        "default-route= only for --route-agent-names); needs --cluster-ca-cert");
  p.add("route-agent-names", &route_agent_names,
        "Certificate names (CN or DNS SAN) of agents that may claim cidr= and default-route= "
        "identifiers with --verify-agent-identifiers=cert");
  p.add("authentication-timeout", &authentication_timeout,
        "Bound on one agent TokenReview; a slower apiserver rejects the agent");
  p.add("kubeconfig-qps", &kubeconfig_qps,
        "Most requests per second to the apiserver, for TokenReviews and for Leases each (0: "
        "client-go's 5; negative: no limit). A request waits for its turn; a TokenReview that "
        "cannot start within --authentication-timeout rejects the agent without calling the "
        "apiserver");
  p.add("kubeconfig-burst", &kubeconfig_burst,
        "Requests the apiserver client may send at once before --kubeconfig-qps applies (0: "
        "client-go's 10; required when --kubeconfig-qps is positive)");
  p.add("kube-api-content-type", &kube_api_content_type,
        "Content type upstream asks the apiserver for; konn's calls (TokenReview, Lease) always "
        "use application/json, and a warning says so when another one is set");
  p.add("proxy-strategies", &proxy_strategies,
        "Ordered backend selection strategies: default, destHost, defaultRoute");
  p.add("agent-choice", &agent_choice,
        "How a strategy chooses among several agents it could use: least-loaded (of two drawn "
        "at random, the one with fewer open tunnels, pending dials and bytes queued to it) or "
        "random (upstream's uniform choice); draining agents only when no other matches");
  p.add("server-id", &server_id, "Unique id of this server");
  p.set_default_text("server-id", "$PROXY_SERVER_ID or a random UUID");
  p.add("server-count", &server_count,
        "Number of proxy servers agents should connect to (sent to them as servercount); 0 or "
        "less, accepted as upstream does with a warning, tells them the count is unknown, so "
        "they keep connecting every --sync-interval to find servers");
  p.add("enable-lease-controller", &enable_lease_controller, "Publish a Lease for this server");
  p.add("lease-namespace", &lease_namespace, "Namespace of server Leases");
  p.add("lease-label", &lease_label, "Labels (k=v,...) set on this server's Lease");
  p.add("lease-renew-interval", &lease_renew_interval,
        "How often the Lease is renewed and expired ones deleted; it lasts twice as long");
  p.add("xfr-channel-size", &xfr_channel_size,
        "Per-tunnel queue depth, in 1 MiB packets, towards peers without flow control");
  p.add("frontend-write-channel-size", &frontend_write_channel_size,
        "Upstream: packets queued per HTTP CONNECT frontend before the agent stream blocks (0: "
        "no queue). konn has no such queue: each tunnel queues towards its client by bytes "
        "(konn's credit, or --xfr-channel-size) and one slow client never blocks the agent "
        "stream alone; accepted (0 or more) and unused");
  p.add("backend-dial-timeout", &backend_dial_timeout, "Bound on waiting for DIAL_RSP (0: none)");
  p.add("graceful-shutdown-timeout", &graceful_shutdown_timeout,
        "How long open tunnels may finish after SIGTERM (0: close at once)");
  p.add("cert-reload-interval", &cert_reload_interval,
        "Re-read certificates, keys and CA bundles this often; new handshakes use them and open "
        "tunnels stay up (0: never)");
  p.add("http-connect-header-timeout", &http_connect_header_timeout,
        "How long an HTTP CONNECT client may take to send its request head");
  p.add("http-connect-half-close", &http_connect_half_close,
        "Pass a CONNECT client's EOF to the destination as a half-close (with konn agents) "
        "instead of closing the tunnel; such a tunnel then ends when the destination closes, "
        "a write to the client fails, or after --half-close-timeout without traffic");
  p.add("half-close-timeout", &half_close_timeout,
        "Close a tunnel whose one side finished sending once nothing moved for this long");
  p.add("tunnel-idle-timeout", &tunnel_idle_timeout,
        "Close an established tunnel once nothing moved for this long (0: never)");
  p.add("stalled-client-timeout", &stalled_client_timeout,
        "Agents without konn flow control (upstream's) are not read while too much of their "
        "DATA waits for slow clients; a tunnel whose client takes none of it for this long is "
        "closed (RESOURCE_EXHAUSTED) so the agent's other tunnels move (0: never)");
  p.add("max-frontend-streams", &max_frontend_streams,
        "Frontend tunnels open at once (gRPC Proxy streams and CONNECT connections); more are "
        "refused with RESOURCE_EXHAUSTED or HTTP 503 (0: no limit)");
  p.add("max-pending-dials", &max_pending_dials,
        "Dials awaiting an agent's answer, in all; more are refused (0: no limit)");
  p.add("max-pending-dials-per-agent", &max_pending_dials_per_agent,
        "Dials awaiting the answer of one agent stream; more are refused (0: no limit)");
  p.add("max-tunnels-per-agent", &max_tunnels_per_agent,
        "Tunnels (pending and established) one agent stream carries; more dials to it are "
        "refused (0: no limit)");
  p.add("node-to-control-plane-destinations", &node_to_control_plane_destinations,
        "konn, node to control plane: HOST:PORT list that agents may reach through their "
        "stream (usually the kube-apiserver beside this server); anything else is refused. "
        "Empty: off");
  p.add("max-node-to-control-plane-connections", &max_node_to_control_plane_connections,
        "Node-to-control-plane tunnels (dialling or open) at once; more dials are refused (0: no "
        "limit)");
  p.add("node-to-control-plane-dial-timeout", &node_to_control_plane_dial_timeout,
        "Bound on each dial to a --node-to-control-plane-destinations address");
  p.add("http-connect-max-header-bytes", &http_connect_max_header_bytes,
        "Largest HTTP CONNECT request head; larger ones are answered 431");
  p.add("tls-handshake-timeout", &tls_handshake_timeout,
        "Bound on a TLS handshake on the agent port and the TCP frontend");
  p.add("dial-request-timeout", &dial_request_timeout,
        "A gRPC frontend stream that sends no DIAL_REQ within this is finished");
  p.add("admin-port", &admin_port, "Admin HTTP port");
  p.add("admin-bind-address", &admin_bind_address,
        "Admin HTTP bind address (/metrics, and /status and /status.json: the agents, tunnels, "
        "recent dial failures, limits and certificates)");
  p.add("status-page-off-loopback", &status_page_off_loopback,
        "Serve /status and /status.json also when --admin-bind-address is not a loopback "
        "address (they show no tokens or keys); off, they answer 403 there");
  p.add("health-port", &health_port, "Health HTTP port");
  p.add("health-bind-address", &health_bind_address, "Health HTTP bind address");
  p.add("enable-profiling", &enable_profiling,
        "Serve a CPU profile, heap statistics and an index under /debug/pprof/ on the admin "
        "port (konn's own formats, not Go's pprof: see the README)");
  p.add("enable-contention-profiling", &enable_contention_profiling,
        "Accepted with --enable-profiling; konn has no lock-contention profile: it warns at "
        "start and /debug/pprof/block and /debug/pprof/mutex answer 501");
  p.add_ignored("warn-on-channel-limit", "Deprecated upstream");
  // klog flags that upstream manifests pass.
  core::config::register_log_flags(p, &log_level, &log_file);
}

void ServerOptions::apply_environment() {
  if (server_id.empty()) {
    const char* env = std::getenv("PROXY_SERVER_ID");
    server_id = (env != nullptr && *env != '\0') ? env : core::config::make_uuid_v4();
  }
}

std::vector<std::string> ServerOptions::validate() const {
  std::vector<std::string> errors;
  if (mode != "grpc" && mode != "http-connect") {
    errors.push_back("--mode: must be grpc or http-connect, got \"" + mode + "\"");
  }
  if (!uds_name.empty()) {
    if (server_port != 0) errors.push_back("--server-port: must be 0 when --uds-name is set");
    if (!server_cert.empty() || !server_key.empty()) {
      errors.push_back("--server-cert/--server-key: not used with --uds-name (plaintext socket)");
    }
    if (!server_ca_cert.empty()) errors.push_back("--server-ca-cert: not used with --uds-name");
  } else {
    core::config::check_range(errors, "--server-port", server_port, 1, 65535, "for a TCP frontend");
    if (server_cert.empty() || server_key.empty()) {
      errors.push_back("--server-cert and --server-key: required for a TCP frontend");
    }
    if (server_ca_cert.empty()) {
      errors.push_back("--server-ca-cert: required for a TCP frontend (clients use mTLS)");
    }
  }
  core::config::check_range(errors, "--agent-port", agent_port, 0, 65535);
  if (cluster_cert.empty() || cluster_key.empty()) {
    errors.push_back("--cluster-cert and --cluster-key: required (agents always use TLS)");
  }
  bool any_auth = !agent_namespace.empty() || !agent_service_account.empty() ||
                  !authentication_audience.empty();
  bool all_auth = !agent_namespace.empty() && !agent_service_account.empty() &&
                  !authentication_audience.empty();
  if (any_auth && !all_auth) {
    errors.push_back(
        "--agent-namespace, --agent-service-account, --authentication-audience: set all three "
        "or none");
  }
  if (auto e = core::kube::rate_limit_flags_error(kubeconfig_qps, kubeconfig_burst)) {
    errors.push_back(*e);
  }
  if (authentication_timeout.count() <= 0) {
    errors.push_back("--authentication-timeout: must be positive");
  }
  if (verify_agent_identifiers != "none" && verify_agent_identifiers != "cert") {
    errors.push_back("--verify-agent-identifiers: must be none or cert, got \"" +
                     verify_agent_identifiers + "\"");
  }
  if (verify_agent_identifiers == "cert" && cluster_ca_cert.empty()) {
    errors.push_back(
        "--verify-agent-identifiers=cert: needs --cluster-ca-cert (agents' client certificates)");
  }
  if (any_auth && !cluster_ca_cert.empty()) {
    errors.push_back("--cluster-ca-cert: cannot be combined with token authentication");
  }
  for (const auto& s : proxy_strategies) {
    if (s != "default" && s != "destHost" && s != "defaultRoute") {
      errors.push_back("--proxy-strategies: unknown strategy \"" + s +
                       "\" (want default, destHost, defaultRoute)");
    }
  }
  if (proxy_strategies.empty()) errors.push_back("--proxy-strategies: at least one is needed");
  if (!parse_agent_choice(agent_choice)) {
    errors.push_back("--agent-choice: unknown choice \"" + agent_choice +
                     "\" (want least-loaded, random)");
  }
  if (enable_lease_controller) {
    std::vector<std::string> label_errors;
    auto labels = core::kube::parse_label_set(lease_label, &label_errors);
    for (auto& e : label_errors) errors.push_back("--lease-label: " + e);
    if (label_errors.empty() && labels.empty()) {
      errors.push_back("--lease-label: at least one label is needed to find the leases again");
    }
    if (lease_namespace.empty()) errors.push_back("--lease-namespace: must not be empty");
  }
  if (lease_renew_interval < std::chrono::seconds(1)) {
    errors.push_back("--lease-renew-interval: must be at least 1s");
  }
  if (xfr_channel_size <= 0) errors.push_back("--xfr-channel-size: must be greater than 0");
  if (frontend_write_channel_size < 0) {
    errors.push_back("--frontend-write-channel-size: must be 0 or more, got " +
                     std::to_string(frontend_write_channel_size));
  }
  if (backend_dial_timeout.count() < 0) {
    errors.push_back("--backend-dial-timeout: must not be negative");
  }
  if (graceful_shutdown_timeout.count() < 0) {
    errors.push_back("--graceful-shutdown-timeout: must not be negative");
  }
  if (cert_reload_interval.count() < 0 ||
      (cert_reload_interval.count() > 0 && cert_reload_interval < std::chrono::seconds(1))) {
    errors.push_back("--cert-reload-interval: must be 0 or at least 1s");
  }
  if (http_connect_header_timeout.count() <= 0) {
    errors.push_back("--http-connect-header-timeout: must be positive");
  }
  if (half_close_timeout.count() <= 0) errors.push_back("--half-close-timeout: must be positive");
  if (stalled_client_timeout.count() < 0) {
    errors.push_back("--stalled-client-timeout: must not be negative");
  }
  if (tunnel_idle_timeout.count() < 0) {
    errors.push_back("--tunnel-idle-timeout: must be 0 (never) or positive");
  }
  for (auto [flag, value] :
       {std::pair{"--max-frontend-streams", max_frontend_streams},
        std::pair{"--max-pending-dials", max_pending_dials},
        std::pair{"--max-pending-dials-per-agent", max_pending_dials_per_agent},
        std::pair{"--max-tunnels-per-agent", max_tunnels_per_agent},
        std::pair{"--max-node-to-control-plane-connections",
                  max_node_to_control_plane_connections}}) {
    if (value < 0) errors.push_back(std::string(flag) + ": must be 0 (no limit) or positive");
  }
  for (const auto& d : node_to_control_plane_destinations) {
    auto hp = core::net::parse_host_port(d);
    if (!hp || hp->host.empty() || hp->port == 0) {
      errors.push_back("--node-to-control-plane-destinations: \"" + d + "\" is not HOST:PORT");
    }
  }
  if (node_to_control_plane_dial_timeout.count() <= 0) {
    errors.push_back("--node-to-control-plane-dial-timeout: must be positive");
  }
  if (http_connect_max_header_bytes < 1024) {
    errors.push_back("--http-connect-max-header-bytes: must be at least 1024");
  }
  if (tls_handshake_timeout.count() <= 0) {
    errors.push_back("--tls-handshake-timeout: must be positive");
  }
  if (dial_request_timeout.count() <= 0) {
    errors.push_back("--dial-request-timeout: must be positive");
  }
  core::config::check_range(errors, "--admin-port", admin_port, 0, 65535);
  core::config::check_range(errors, "--health-port", health_port, 0, 65535);
  core::tls::openssl_min_version(tls_min_version, &errors);
  core::tls::openssl_cipher_list(cipher_suites, &errors);
  if (enable_contention_profiling && !enable_profiling) {
    errors.push_back("--enable-contention-profiling: needs --enable-profiling too (as upstream)");
  }
  return errors;
}

void ServerOptions::print(spdlog::logger& log) const {
  log.info(
      "proxy-server {}: mode={} frontend={} agent-port={}:{} mTLS-agents={} server-id={} "
      "server-count={} strategies={} agent-choice={} xfr-channel-size={} backend-dial-timeout={} "
      "graceful-shutdown-timeout={} leases={} http-connect-half-close={} half-close-timeout={} "
      "tunnel-idle-timeout={}",
      "starting", mode,
      uds_name.empty() ? server_bind_address + ":" + std::to_string(server_port)
                       : "unix:" + uds_name,
      agent_bind_address, agent_port, !cluster_ca_cert.empty(), server_id, server_count,
      fmt::join(proxy_strategies, ","), agent_choice, xfr_channel_size,
      format_go_duration(backend_dial_timeout), format_go_duration(graceful_shutdown_timeout),
      enable_lease_controller ? lease_namespace + "/" + lease_label : std::string("off"),
      http_connect_half_close, format_go_duration(half_close_timeout),
      format_go_duration(tunnel_idle_timeout));
  log.info(
      "limits: frontend-streams={} pending-dials={} pending-dials-per-agent={} "
      "tunnels-per-agent={} connect-header-bytes={} tls-handshake-timeout={} "
      "dial-request-timeout={} (0: no limit)",
      max_frontend_streams, max_pending_dials, max_pending_dials_per_agent, max_tunnels_per_agent,
      http_connect_max_header_bytes, format_go_duration(tls_handshake_timeout),
      format_go_duration(dial_request_timeout));
  if (!node_to_control_plane_destinations.empty()) {
    log.info(
        "node to control plane: agents may reach {}; at most {} tunnels (0: no limit); dial "
        "timeout {}",
        fmt::join(node_to_control_plane_destinations, ","), max_node_to_control_plane_connections,
        format_go_duration(node_to_control_plane_dial_timeout));
  }
  for (const auto& w : warnings()) log.warn("{}", w);
}

std::vector<std::string> ServerOptions::warnings() const {
  std::vector<std::string> out;
  if (auto w = core::tls::min_version_warning(tls_min_version); !w.empty()) out.push_back(w);
  if (server_count < 1) {
    out.push_back("--server-count=" + std::to_string(server_count) +
                  ": agents are told the number of servers is unknown and keep connecting every "
                  "--sync-interval to find more, as with --sync-forever (upstream's meaning)");
  }
  if (enable_lease_controller) {
    std::vector<std::string> ignored;
    std::vector<std::string> label_warnings;
    core::kube::parse_label_set(lease_label, &ignored, &label_warnings);
    for (const auto& w : label_warnings) out.push_back("--lease-label: " + w);
  }
  if (auto w = core::kube::content_type_warning(
          kube_api_content_type, enable_lease_controller || !agent_namespace.empty());
      !w.empty()) {
    out.push_back(w);
  }
  return out;
}

int ServerOptions::openssl_min_version() const {
  std::vector<std::string> ignored;
  return core::tls::openssl_min_version(tls_min_version, &ignored);
}

std::string ServerOptions::openssl_ciphers() const {
  std::vector<std::string> ignored;
  return core::tls::openssl_cipher_list(cipher_suites, &ignored);
}

Duration ServerOptions::quiet_limit(bool half_closed) const {
  if (!half_closed) return tunnel_idle_timeout;
  if (tunnel_idle_timeout.count() > 0) return std::min(half_close_timeout, tunnel_idle_timeout);
  return half_close_timeout;
}

std::string ServerOptions::quiet_reason(bool half_closed) const {
  return std::string(half_closed ? "half-closed" : "idle") + " tunnel quiet for " +
         format_go_duration(quiet_limit(half_closed)) +
         (half_closed ? " (--half-close-timeout)" : " (--tunnel-idle-timeout)");
}

size_t ServerOptions::tunnel_queue_cap_bytes() const {
  return static_cast<size_t>(xfr_channel_size) * core::tunnel::kCoalesceLimit;
}

}  // namespace konn::server
