#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "core/config/flag_parser.h"
#include "core/konnectivity/upstream_options.h"
#include "socks5/rules.h"

namespace konn::socks5 {

// Every setting of the socks5 daemon. YAML keys (--config) are the long flag names.
// Immutable once validated; passed by const& to everything that needs it.
struct Socks5Options {
  std::string bind_address = "127.0.0.1";  // "" or "::" = every interface
  int port = 1080;
  std::string users_file;          // when set, method 02 (RFC 1929) is required
  std::vector<std::string> rules;  // raw `--rule` lines, parsed by validate()
  std::string default_policy = "allow";
  core::config::Duration handshake_timeout = std::chrono::seconds(10);
  core::config::Duration connect_timeout = std::chrono::seconds(30);
  core::config::Duration idle_timeout = std::chrono::hours(1);  // 0 = none
  // A session with one direction ended (a half-close passed on) is closed once nothing moved for
  // this long; 0 = only --idle-timeout bounds it.
  core::config::Duration half_close_timeout = std::chrono::seconds(30);
  int max_sessions = 10000;              // 0 = unlimited
  int max_sessions_per_client = 0;       // 0 = unlimited
  std::vector<std::string> dns_servers;  // "ip[:port]"; empty = /etc/resolv.conf
  core::config::Duration dns_timeout = std::chrono::seconds(5);
  bool enable_bind = true;
  bool enable_udp = true;
  bool splice = true;                   // zero-copy relay between plain TCP sockets
  int splice_pipe_bytes = 1024 * 1024;  // per direction, in the kernel, only while data flows
  int buffer_size = 16 * 1024;          // per direction, buffered relay
  int workers = 0;                      // 0 = one per core
  core::config::Duration graceful_shutdown_timeout = std::chrono::seconds(15);
  std::string log_level = "info";
  std::string log_file;
  // Health and metrics listener (/healthz, /readyz, /metrics), as the proxy-server's
  // --health-port; 0 picks a free port (logged), -1 turns it off. When the default port is taken
  // (a second socks5 on the machine) start-up logs a warning and runs without it; a port that was
  // given must be bound.
  int health_port = 8096;
  bool health_port_set = false;     // --health-port was given (command line or file)
  std::string health_bind_address;  // "" = every interface (kubelet probes the pod IP)
  // /status and /status.json on the health listener answer 403 unless it is bound to loopback or
  // this is set (the page shows no secrets, but client addresses and destinations).
  bool status_page_off_loopback = false;
  // --konnectivity-*: dial CONNECT destinations through a Konnectivity proxy-server.
  core::konnectivity::UpstreamOptions konnectivity;

  // Parsed from `rules`/`default_policy` by validate().
  RuleSet rule_set;

  void register_flags(core::config::FlagParser& p);
  // Every problem at once; also fills rule_set.
  std::vector<std::string> validate();
  void print(spdlog::logger& log) const;
};

}  // namespace konn::socks5
