#include "socks5/socks5_options.h"

#include "core/config/validation.h"

namespace konn::socks5 {

using core::config::format_go_duration;

void Socks5Options::register_flags(core::config::FlagParser& p) {
  p.add("bind-address", &bind_address, "Address to listen on (\"\" for every interface)");
  p.add("port", &port, "TCP port to listen on (0 picks a free one; the log says which)");
  p.add("users-file", &users_file,
        "File of user:crypt-hash lines (openssl passwd -6); when set, authentication is required");
  p.add_custom(
      "rule",
      [this](const std::string& v) {
        rules.push_back(v);
        return std::string();
      },
      "Access rule, repeatable, first match wins: allow|deny [from=CIDR] [user=NAME] [to=CIDR] "
      "[host=GLOB] [port=N|N-M] [cmd=connect|bind|udp]");
  p.add("default-policy", &default_policy, "allow or deny when no rule matches");
  p.add("handshake-timeout", &handshake_timeout, "Time allowed for greeting, auth and request");
  p.add("connect-timeout", &connect_timeout, "Time allowed to resolve and connect a destination");
  p.add("idle-timeout", &idle_timeout, "Close a session with no traffic for this long (0 = never)");
  p.add("half-close-timeout", &half_close_timeout,
        "Close a session whose one side finished sending (half-close) once nothing moved for "
        "this long (0 = only --idle-timeout)");
  p.add("max-sessions", &max_sessions, "Maximum concurrent sessions (0 = unlimited)");
  p.add("max-sessions-per-client", &max_sessions_per_client,
        "Maximum concurrent sessions per client IP (0 = unlimited)");
  p.add("dns-servers", &dns_servers, "Name servers ip[:port], comma separated");
  p.set_default_text("dns-servers", "the system's, from /etc/resolv.conf");
  p.add("dns-timeout", &dns_timeout, "Per-try DNS timeout");
  p.add("enable-bind", &enable_bind, "Accept the BIND command");
  p.add("enable-udp", &enable_udp, "Accept the UDP ASSOCIATE command");
  p.add("splice", &splice, "Relay plain TCP with splice(2) (zero-copy)");
  p.add("splice-pipe-bytes", &splice_pipe_bytes,
        "Pipe capacity per direction for the splice relay (kernel memory while data is in flight)");
  p.add("buffer-size", &buffer_size, "Bytes per direction for the buffered relay");
  p.add("workers", &workers, "I/O threads (0 = one per core)");
  p.add("graceful-shutdown-timeout", &graceful_shutdown_timeout,
        "On SIGTERM, how long sessions may finish before they are closed");
  p.add("log-level", &log_level, "trace, debug, info, warn, error, off (or klog 0-10)");
  p.add("log-file", &log_file, "Write logs to this file instead of stderr");
  p.add("health-port", &health_port,
        "Port of the /healthz, /readyz and /metrics listener (0: any free port, -1: none); when "
        "the default port is taken it is logged and skipped");
  p.add("health-bind-address", &health_bind_address,
        "Bind address of the health listener (empty: every interface)");
  p.add("status-page-off-loopback", &status_page_off_loopback,
        "Serve /status and /status.json on a health listener bound beyond loopback (else 403)");
  konnectivity.register_flags(p);
}

std::vector<std::string> Socks5Options::validate() {
  std::vector<std::string> errors;
  core::config::check_range(errors, "--port", port, 0, 65535);
  if (default_policy != "allow" && default_policy != "deny") {
    errors.push_back("--default-policy: must be allow or deny");
  }
  if (handshake_timeout <= core::config::Duration::zero()) {
    errors.push_back("--handshake-timeout: must be positive");
  }
  if (connect_timeout <= core::config::Duration::zero()) {
    errors.push_back("--connect-timeout: must be positive");
  }
  if (idle_timeout < core::config::Duration::zero()) {
    errors.push_back("--idle-timeout: must not be negative");
  }
  if (half_close_timeout < core::config::Duration::zero()) {
    errors.push_back("--half-close-timeout: must not be negative");
  }
  if (max_sessions < 0) errors.push_back("--max-sessions: must not be negative");
  if (max_sessions_per_client < 0) {
    errors.push_back("--max-sessions-per-client: must not be negative");
  }
  core::config::check_range(errors, "--buffer-size", buffer_size, 512, 16 * 1024 * 1024);
  core::config::check_range(errors, "--splice-pipe-bytes", splice_pipe_bytes, 4096, 1024 * 1024);
  if (workers < 0) errors.push_back("--workers: must not be negative");
  core::config::check_range(errors, "--health-port", health_port, -1, 65535);
  konnectivity.validate(errors);
  std::vector<Rule> parsed;
  for (const auto& text : rules) {
    Rule r;
    auto err = Rule::parse(text, &r);
    if (!err.empty()) {
      errors.push_back("--rule: " + err);
    } else {
      parsed.push_back(std::move(r));
    }
  }
  rule_set = RuleSet(std::move(parsed), default_policy != "deny");
  return errors;
}

void Socks5Options::print(spdlog::logger& log) const {
  log.info(
      "options: bind-address={:?} port={} users-file={:?} rules={} default-policy={} "
      "handshake-timeout={} connect-timeout={} idle-timeout={} half-close-timeout={} "
      "max-sessions={} "
      "max-sessions-per-client={} dns-servers={} enable-bind={} enable-udp={} splice={} "
      "splice-pipe-bytes={} buffer-size={} workers={} graceful-shutdown-timeout={}",
      bind_address, port, users_file, rules.size(), default_policy,
      format_go_duration(handshake_timeout), format_go_duration(connect_timeout),
      format_go_duration(idle_timeout), format_go_duration(half_close_timeout), max_sessions,
      max_sessions_per_client,
      dns_servers.empty() ? std::string("system") : fmt::format("{}", fmt::join(dns_servers, ",")),
      enable_bind, enable_udp, splice, splice_pipe_bytes, buffer_size, workers,
      format_go_duration(graceful_shutdown_timeout));
  log.info("options: health-port={} health-bind-address={:?} konnectivity: {}", health_port,
           health_bind_address, konnectivity.describe());
  for (size_t i = 0; i < rules.size(); ++i) log.info("rule {}: {}", i, rules[i]);
}

}  // namespace konn::socks5
