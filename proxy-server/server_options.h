#pragma once

#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "core/config/duration.h"
#include "core/config/flag_parser.h"

namespace konn::server {

using core::config::Duration;

// Every proxy-server flag, with upstream ANP's names and defaults so existing manifests work.
// Immutable after parsing; passed by const& to whoever needs it.
struct ServerOptions {
  // Frontend (kube-apiserver side).
  std::string mode = "grpc";  // grpc | http-connect
  std::string uds_name;       // non-empty: frontend on this unix socket, plaintext
  bool delete_existing_uds_file = true;
  int server_port = 8090;
  std::string server_bind_address;
  std::string server_cert;
  std::string server_key;
  std::string server_ca_cert;
  Duration frontend_keepalive_time = std::chrono::hours(1);

  // Agent listener.
  int agent_port = 8091;
  std::string agent_bind_address;
  std::string cluster_cert;
  std::string cluster_key;
  std::string cluster_ca_cert;
  Duration keepalive_time = std::chrono::hours(1);

  // TLS tuning.
  std::vector<std::string> cipher_suites;
  std::string tls_min_version;

  // Agent authentication by service-account token.
  std::string agent_namespace;
  std::string agent_service_account;
  std::string authentication_audience;
  std::string kubeconfig;
  // Client-side rate limit on the apiserver calls (TokenReviews, Leases), client-go's meaning:
  // 0 keeps its default (5/s, burst 10), a negative qps turns the limit off.
  double kubeconfig_qps = 0;
  int kubeconfig_burst = 0;
  std::string kube_api_content_type = "application/vnd.kubernetes.protobuf";
  // konn: a TokenReview that takes longer rejects the agent.
  Duration authentication_timeout = std::chrono::seconds(5);
  // konn: "cert" admits only the agent identifiers its client certificate proves (host: a DNS
  // SAN, ipv4/ipv6: an IP SAN; cidr and default-route: agents named in route_agent_names by CN
  // or DNS SAN); needs --cluster-ca-cert. "none" (default): identifiers are trusted as sent, as
  // upstream does.
  std::string verify_agent_identifiers = "none";
  std::vector<std::string> route_agent_names;

  // Routing and HA.
  std::vector<std::string> proxy_strategies{"default"};
  // konn: how an agent is chosen among a strategy's candidates: "least-loaded" (the less loaded
  // of two at random: open tunnels, pending dials, queued bytes) or "random" (upstream's).
  std::string agent_choice = "least-loaded";
  std::string server_id;  // default: $PROXY_SERVER_ID, else a fresh UUID
  int server_count = 1;
  bool enable_lease_controller = false;
  std::string lease_namespace = "kube-system";
  std::string lease_label = "k8s-app=konnectivity-server";
  // konn: how often the lease is renewed and expired ones collected (upstream: fixed 15s); the
  // lease lasts twice as long.
  Duration lease_renew_interval = std::chrono::seconds(15);

  // Flow control, timeouts, shutdown.
  int xfr_channel_size = 10;
  // Upstream PR #896's per-frontend write queue, in packets (0: synchronous writes, PR #918).
  // konn has no such queue: validated (>= 0) and otherwise unused.
  int frontend_write_channel_size = 10;
  Duration backend_dial_timeout{0};
  Duration graceful_shutdown_timeout{0};
  // konn: how often certificate, key and CA files are re-read (0: never).
  Duration cert_reload_interval = std::chrono::seconds(60);
  // konn: a CONNECT client must send its whole request head within this (slowloris bound).
  Duration http_connect_header_timeout = std::chrono::seconds(60);
  // konn: a CONNECT client's EOF is passed to the destination as a half-close (our agent only)
  // instead of closing the tunnel as upstream does. Off by default: kube-apiserver ends every
  // tunnel with a plain close(), and a destination that ignores the FIN would keep it open.
  bool http_connect_half_close = false;
  // konn: a tunnel with one side finished sending (half-close, either frontend) is closed once
  // nothing moved for this long.
  Duration half_close_timeout = std::chrono::seconds(30);
  // konn: an established tunnel (either frontend) is closed once nothing moved for this long
  // (0: never, as upstream).
  Duration tunnel_idle_timeout{0};
  // konn: towards an agent without flow control (upstream's), whose stream stops being read
  // while too much of its DATA waits for slow clients, a tunnel whose client takes none of it for
  // this long is closed so that the agent's other tunnels move (0: never; the agent waits, as
  // under upstream's server).
  Duration stalled_client_timeout = std::chrono::seconds(10);

  // Limits (konn; upstream has none). 0 lifts a limit. Hitting one refuses the stream,
  // connection or dial with a clear answer, counts limits_hit_total{limit} and logs; nothing
  // else is affected.
  // Frontend tunnels open at once: gRPC Proxy streams plus CONNECT connections.
  int max_frontend_streams = 50000;
  // Dials sent to agents and not answered yet: in all, and routed to one agent stream.
  int max_pending_dials = 10000;
  int max_pending_dials_per_agent = 2000;
  // Tunnels (pending and established) one agent stream carries.
  int max_tunnels_per_agent = 20000;
  // Largest CONNECT request head (answered 431 beyond it).
  int http_connect_max_header_bytes = 64 * 1024;
  // TLS handshakes on the agent port and the TCP frontends (gRPC and CONNECT) must end within it.
  Duration tls_handshake_timeout = std::chrono::seconds(10);
  // A gRPC frontend stream must send its DIAL_REQ within this, else it is finished.
  Duration dial_request_timeout = std::chrono::seconds(60);

  // konn, node to control plane (KEP-2025): the only HOST:PORT destinations an agent's
  // KONN_NODE_DIAL_REQ may ask for (exactly as written; the first one when it names none).
  // Empty: the extension is off and never confirmed to agents.
  std::vector<std::string> node_to_control_plane_destinations;
  // konn: node-to-control-plane tunnels (dialling or open) at once, over all agents; more dials
  // are refused (0: no limit).
  int max_node_to_control_plane_connections = 10000;
  // konn: bound on each dial to a node-to-control-plane destination.
  Duration node_to_control_plane_dial_timeout = std::chrono::seconds(5);

  // Admin and health.
  int admin_port = 8095;
  std::string admin_bind_address = "127.0.0.1";
  // konn: serve /status and /status.json when the admin port listens beyond loopback.
  bool status_page_off_loopback = false;
  int health_port = 8092;
  std::string health_bind_address;
  bool enable_profiling = false;
  bool enable_contention_profiling = false;

  // Logging (klog names).
  std::string log_level = "info";
  std::string log_file;

  // Registers every flag, including accepted-but-ignored upstream ones.
  void register_flags(core::config::FlagParser& parser);
  // Fills defaults that depend on the environment (server id).
  void apply_environment();
  // Every problem at once, each naming its flag.
  std::vector<std::string> validate() const;
  // One line per setting at startup.
  void print(spdlog::logger& log) const;
  // What print() logs as warnings: values upstream accepts that konn takes with a different or
  // reduced meaning (each line names the flag). Call after validate() passed.
  std::vector<std::string> warnings() const;

  // A tunnel whose queue towards a peer without flow control passes this is closed alone.
  size_t tunnel_queue_cap_bytes() const;
  // --tls-min-version as the OpenSSL version enforced (TLS1_2_VERSION or TLS1_3_VERSION); call
  // after validate() passed.
  int openssl_min_version() const;
  // --cipher-suites as an OpenSSL list ("" when not set); call after validate() passed.
  std::string openssl_ciphers() const;
  // How long a tunnel may move nothing: --half-close-timeout once one side finished (or
  // --tunnel-idle-timeout when that is shorter), else --tunnel-idle-timeout (0: no limit).
  Duration quiet_limit(bool half_closed) const;
  // The close reason when that limit passed, naming the flag.
  std::string quiet_reason(bool half_closed) const;
};

}  // namespace konn::server
