#pragma once

#include <memory>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "core/config/duration.h"
#include "core/config/flag_parser.h"
#include "core/konnectivity/upstream_options.h"
#include "kubeproxy-http/kubeconfig.h"

namespace konn::kubeproxy {

// Every option of kubeproxy-http. The `kubectl proxy` flags keep kubectl's names and defaults
// (kubectl/pkg/cmd/proxy); the kubeconfig flags are kubectl's global flags. Flags marked
// "kubeproxy-http" are our additions, off or permissive by default unless noted.
struct KubeproxyOptions {
  // kubectl proxy
  int port = 8001;
  std::string address = "127.0.0.1";
  std::string unix_socket;
  std::string api_prefix = "/";
  std::string www;
  std::string www_prefix = "/static/";
  std::vector<std::string> accept_paths{"^.*"};
  std::vector<std::string> reject_paths{"^/api/.*/pods/.*/exec", "^/api/.*/pods/.*/attach"};
  std::vector<std::string> accept_hosts{"^localhost$", "^127\\.0\\.0\\.1$", "^\\[::1\\]$"};
  std::vector<std::string> reject_methods{"^$"};
  bool disable_filter = false;
  core::config::Duration keepalive{0};
  bool append_server_path = false;

  // kubectl global flags
  KubeconfigOverrides kube;

  // kubeproxy-http
  std::string mode = "proxy";                     // "proxy" (kubectl proxy) or "connect"
  std::vector<std::string> allowed_destinations;  // connect: host:port regexes; empty = any
  std::string proxy_user;                         // connect: "user:password" required
  core::config::Duration dial_timeout = std::chrono::seconds(30);
  core::config::Duration request_header_timeout = std::chrono::seconds(30);  // slowloris guard
  // Longest run of a kubeconfig exec credential plugin before it is killed (kubectl: none).
  core::config::Duration exec_plugin_timeout = core::kube::kDefaultExecTimeout;
  int64_t max_header_bytes = 1 << 20;     // request head limit, 431 beyond
  bool strip_client_credentials = false;  // drop callers' Authorization/Impersonate-*
  std::string require_token;              // callers must send "Bearer <this>"
  std::string tls_cert_file;              // TLS on the listener
  std::string tls_key_file;
  std::string client_ca_file;  // callers must present a cert signed by it
  bool access_log = false;
  int workers = 0;  // I/O threads; 0 = one per core
  std::string log_level = "info";
  // Health and metrics listener (/healthz, /livez, /readyz, /metrics); 0: any free port, -1:
  // none. Proxy mode (a `kubectl proxy` stand-in, often several per machine) opens it only when
  // --health-port is given; connect mode (a Deployment) opens 8097 unless told otherwise, and
  // carries on without it, with a warning, when that default port is taken. A port that was
  // given must be bound.
  int health_port = 8097;
  bool health_port_set = false;     // --health-port was given (command line or file)
  std::string health_bind_address;  // "": 127.0.0.1 in proxy mode, every interface in connect
  // /status and /status.json on the health listener answer 403 unless it is bound to loopback or
  // this is set (the page shows no secrets, but client addresses and destinations).
  bool status_page_off_loopback = false;

  // The health port start-up opens (-1: none) and its bind address ("" = every interface).
  int effective_health_port() const;
  std::string effective_health_bind_address() const;
  // connect mode: dial CONNECT destinations through a Konnectivity proxy-server.
  core::konnectivity::UpstreamOptions konnectivity;
  // connect mode: a tunnel with one side finished sending (a half-close passed on) is closed once
  // nothing moved for this long (0: never).
  core::config::Duration half_close_timeout = std::chrono::seconds(30);

  void register_flags(core::config::FlagParser& flags);
  // Every problem at once, each naming its flag. `port_set` tells whether --port was given.
  std::vector<std::string> validate(bool port_set) const;
  void print(spdlog::logger& log) const;
};

}  // namespace konn::kubeproxy
