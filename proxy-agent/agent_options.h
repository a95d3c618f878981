#pragma once

#include <optional>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "core/config/duration.h"
#include "core/config/flag_parser.h"
#include "core/net/destination_policy.h"
#include "core/net/endpoint.h"
#include "proxy-agent/egress_proxy.h"

namespace konn::agent {

using core::config::Duration;

// One --node-to-control-plane-listen value.
struct NodeListen {
  core::net::HostPort listen;
  std::string destination;  // empty: the server's first destination
};
// Parses "ADDR:PORT" or "ADDR:PORT=HOST:PORT"; nullopt with `error` set when malformed.
std::optional<NodeListen> parse_node_listen(const std::string& text, std::string* error);

// Every proxy-agent flag, with upstream ANP's names and defaults so existing DaemonSets work.
// Immutable after parsing; passed by const& to whoever needs it.
struct AgentOptions {
  // Where the proxy-servers are. Beyond upstream, --proxy-server-host may list several hosts
  // (comma-separated); connection attempts go round-robin over them.
  std::vector<std::string> proxy_server_hosts{"127.0.0.1"};
  int proxy_server_port = 8091;
  // konn: an HTTP proxy (http://[user:pass@]host:port) every server is reached through with
  // CONNECT. Empty: HTTPS_PROXY / NO_PROXY decide, as for a Go program (see EgressProxyConfig).
  std::string proxy_url;
  ProxyEnvironment proxy_env;  // read by apply_environment()

  // TLS towards the server.
  std::string ca_cert;
  std::string agent_cert;
  std::string agent_key;
  std::vector<std::string> alpn_protos;  // offered to the servers, h2 added (alpn_offered())

  // Identity.
  std::string agent_id;           // default: $PROXY_AGENT_ID, else a fresh UUID v4
  std::string agent_identifiers;  // URL query: ipv4, ipv6, host, cidr, default-route
  std::string service_account_token_path;

  // Connection management.
  Duration sync_interval = std::chrono::seconds(1);
  Duration sync_interval_cap = std::chrono::seconds(10);
  Duration probe_interval = std::chrono::seconds(1);
  bool sync_forever = false;
  Duration keepalive_time = std::chrono::hours(1);
  // konn: bounds one connection attempt's TCP connect, proxy CONNECT and TLS handshake (gRPC's
  // minimum connect timeout, 20s by default there too).
  Duration server_connect_timeout = std::chrono::seconds(20);
  // konn: after the first SIGTERM (DRAIN sent), exit once this long has passed (0: only on a
  // second signal, as upstream's agent, which has no such timer).
  Duration drain_timeout{0};

  // Tunnels.
  int xfr_channel_size = 150;
  Duration dial_timeout = std::chrono::seconds(5);
  // konn: where dials may go (core::net::DestinationPolicy rules: [!]<ip|cidr|*>[:port[-port]]),
  // checked on every resolved address. Default: everywhere but the cloud metadata addresses.
  std::vector<std::string> allowed_destinations = core::net::DestinationPolicy::default_rules();
  // konn: endpoint connections (dialling or open) at once, over all server streams; further
  // dials are refused with a DIAL_RSP error (0: no limit).
  int max_endpoint_connections = 20000;
  // konn: an endpoint connection with one side finished sending (a half-close, on tunnels dialled
  // with konnHalfClose) is closed once nothing moved for this long.
  Duration half_close_timeout = std::chrono::seconds(30);

  // konn, node to control plane (KEP-2025): addresses where node-side clients connect, each
  // "ADDR:PORT" (the server's first --node-to-control-plane-destinations) or
  // "ADDR:PORT=HOST:PORT" (that destination, which must be on the server's list). Each accepted
  // connection is tunnelled to a proxy-server that confirmed the extension.
  std::vector<std::string> node_to_control_plane_listen;
  // konn: node-to-control-plane connections (asking or open) at once, over all server streams;
  // a connection accepted past it is closed at once (0: no limit).
  int max_node_to_control_plane_connections = 10000;

  // Health (/healthz /readyz /metrics) and admin (/metrics) listeners.
  std::string health_server_host;
  int health_server_port = 8093;
  std::string admin_bind_address = "127.0.0.1";
  int admin_server_port = 8094;
  // konn: serve /status and /status.json when the admin port listens beyond loopback.
  bool status_page_off_loopback = false;

  // Server count from the proxy-servers' Leases (listed, then watched, as upstream's informer;
  // lease_poll_interval, a konn flag, bounds the gap between lists while no watch runs).
  // server_count_source: "default" (the lease count when counting, else the servers' servercount)
  // or "max" (the larger of both).
  bool count_server_leases = false;
  std::string lease_namespace = "kube-system";
  std::string lease_label_selector = "k8s-app=konnectivity-server";
  std::string server_count_source = "default";
  Duration lease_poll_interval = std::chrono::seconds(10);
  std::string kubeconfig;  // for the Lease list; empty: in-cluster service account

  // Accepted for compatibility; not acted on (JSON is always used).
  bool warn_on_channel_limit = false;
  std::string kube_api_content_type = "application/vnd.kubernetes.protobuf";
  // /debug/pprof/ on the admin port (core/profiling).
  bool enable_profiling = false;
  bool enable_contention_profiling = false;

  // Logging (klog names). --v takes a klog number (0-10) or a level name.
  std::string log_level = "info";
  std::string log_file;

  // Registers every flag, including the accepted-but-ignored upstream ones.
  void register_flags(core::config::FlagParser& parser);
  // Fills defaults that depend on the environment (agent id from $PROXY_AGENT_ID or a UUID) and
  // reads HTTPS_PROXY / NO_PROXY into proxy_env.
  void apply_environment();
  // Every problem at once, each naming its flag. Empty means usable.
  std::vector<std::string> validate() const;
  // One startup line with the effective settings; never the token.
  void print(spdlog::logger& log) const;
  // The ALPN ids offered to each proxy-server, in order: --alpn-proto as given, then "h2" unless
  // it is in the list (what upstream's gRPC-Go client offers with the same flag); empty without
  // --alpn-proto (then "h2" alone is offered).
  std::vector<std::string> alpn_offered() const;
  // What print() logs as warnings: values upstream accepts that konn takes with a different or
  // reduced meaning (each line names the flag). Call after validate() passed.
  std::vector<std::string> warnings() const;
  // The proxy decision from proxy_url and proxy_env; validate() has checked it.
  EgressProxyConfig egress_proxy() const;
};

// Checks an --agent-identifiers value: a URL query string whose keys are ipv4, ipv6, host, cidr
// or default-route. Returns one message per error (escapes, separators, unknown keys: upstream
// refuses them too). A value without the key's syntax (an ipv4 that is no address, a bad cidr,
// an empty host, a default-route that is no boolean) is accepted as upstream accepts it, with a
// message appended to `warnings` when given.
std::vector<std::string> validate_agent_identifiers(const std::string& query,
                                                    std::vector<std::string>* warnings = nullptr);

}  // namespace konn::agent
