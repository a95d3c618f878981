#include "core/config/daemon_flags.h"

#include <algorithm>

#include "core/config/log_flags.h"

namespace konn::core::config {
namespace {

// core/konnectivity's UpstreamOptions (socks5 and kubeproxy-http register them).
constexpr std::string_view kKonnectivityFlags[] = {
    "konnectivity-address",     "konnectivity-mode",       "konnectivity-ca-cert",
    "konnectivity-client-cert", "konnectivity-client-key", "konnectivity-server-name",
    "konnectivity-dial-timeout"};

std::vector<std::string_view> with_log_flags(std::vector<std::string_view> flags) {
  const auto& log = log_flag_names();
  flags.insert(flags.end(), log.begin(), log.end());
  return flags;
}

std::vector<std::string_view> with_konnectivity_flags(std::vector<std::string_view> flags) {
  flags.insert(flags.end(), std::begin(kKonnectivityFlags), std::end(kKonnectivityFlags));
  return flags;
}

}  // namespace

const std::vector<DaemonFlags>& daemon_flag_table() {
  static const std::vector<DaemonFlags> table = {
      {"proxy-server", with_log_flags({"mode",
                                       "uds-name",
                                       "delete-existing-uds-file",
                                       "server-port",
                                       "server-bind-address",
                                       "server-cert",
                                       "server-key",
                                       "server-ca-cert",
                                       "frontend-keepalive-time",
                                       "agent-port",
                                       "agent-bind-address",
                                       "cluster-cert",
                                       "cluster-key",
                                       "cluster-ca-cert",
                                       "keepalive-time",
                                       "cipher-suites",
                                       "tls-min-version",
                                       "agent-namespace",
                                       "agent-service-account",
                                       "authentication-audience",
                                       "kubeconfig",
                                       "verify-agent-identifiers",
                                       "route-agent-names",
                                       "authentication-timeout",
                                       "kubeconfig-qps",
                                       "kubeconfig-burst",
                                       "kube-api-content-type",
                                       "proxy-strategies",
                                       "agent-choice",
                                       "server-id",
                                       "server-count",
                                       "enable-lease-controller",
                                       "lease-namespace",
                                       "lease-label",
                                       "lease-renew-interval",
                                       "xfr-channel-size",
                                       "frontend-write-channel-size",
                                       "backend-dial-timeout",
                                       "graceful-shutdown-timeout",
                                       "cert-reload-interval",
                                       "http-connect-header-timeout",
                                       "http-connect-half-close",
                                       "half-close-timeout",
                                       "tunnel-idle-timeout",
                                       "stalled-client-timeout",
                                       "max-frontend-streams",
                                       "max-pending-dials",
                                       "max-pending-dials-per-agent",
                                       "max-tunnels-per-agent",
                                       "node-to-control-plane-destinations",
                                       "max-node-to-control-plane-connections",
                                       "node-to-control-plane-dial-timeout",
                                       "http-connect-max-header-bytes",
                                       "tls-handshake-timeout",
                                       "dial-request-timeout",
                                       "admin-port",
                                       "admin-bind-address",
                                       "status-page-off-loopback",
                                       "health-port",
                                       "health-bind-address",
                                       "enable-profiling",
                                       "enable-contention-profiling",
                                       "warn-on-channel-limit"})},
      {"proxy-agent", with_log_flags({"proxy-server-host",
                                      "proxy-server-port",
                                      "proxy-url",
                                      "ca-cert",
                                      "agent-cert",
                                      "agent-key",
                                      "alpn-proto",
                                      "agent-id",
                                      "agent-identifiers",
                                      "service-account-token-path",
                                      "sync-interval",
                                      "sync-interval-cap",
                                      "probe-interval",
                                      "sync-forever",
                                      "keepalive-time",
                                      "server-connect-timeout",
                                      "drain-timeout",
                                      "xfr-channel-size",
                                      "dial-timeout",
                                      "allowed-destinations",
                                      "max-endpoint-connections",
                                      "half-close-timeout",
                                      "node-to-control-plane-listen",
                                      "max-node-to-control-plane-connections",
                                      "warn-on-channel-limit",
                                      "count-server-leases",
                                      "lease-namespace",
                                      "lease-label-selector",
                                      "lease-label",
                                      "server-count-source",
                                      "lease-poll-interval",
                                      "kubeconfig",
                                      "kube-api-content-type",
                                      "health-server-host",
                                      "health-server-port",
                                      "admin-bind-address",
                                      "admin-server-port",
                                      "status-page-off-loopback",
                                      "enable-profiling",
                                      "enable-contention-profiling"})},
      {"socks5", with_konnectivity_flags({"bind-address",
                                          "port",
                                          "users-file",
                                          "rule",
                                          "default-policy",
                                          "handshake-timeout",
                                          "connect-timeout",
                                          "idle-timeout",
                                          "half-close-timeout",
                                          "max-sessions",
                                          "max-sessions-per-client",
                                          "dns-servers",
                                          "dns-timeout",
                                          "enable-bind",
                                          "enable-udp",
                                          "splice",
                                          "splice-pipe-bytes",
                                          "buffer-size",
                                          "workers",
                                          "graceful-shutdown-timeout",
                                          "log-level",
                                          "log-file",
                                          "health-port",
                                          "health-bind-address",
                                          "status-page-off-loopback"})},
      {"kubeproxy-http", with_konnectivity_flags({"port",
                                                  "address",
                                                  "unix-socket",
                                                  "api-prefix",
                                                  "www",
                                                  "www-prefix",
                                                  "accept-paths",
                                                  "reject-paths",
                                                  "accept-hosts",
                                                  "reject-methods",
                                                  "disable-filter",
                                                  "keepalive",
                                                  "append-server-path",
                                                  "kubeconfig",
                                                  "context",
                                                  "cluster",
                                                  "user",
                                                  "server",
                                                  "token",
                                                  "certificate-authority",
                                                  "client-certificate",
                                                  "client-key",
                                                  "insecure-skip-tls-verify",
                                                  "tls-server-name",
                                                  "as",
                                                  "as-group",
                                                  "mode",
                                                  "allowed-destinations",
                                                  "proxy-user",
                                                  "dial-timeout",
                                                  "request-header-timeout",
                                                  "exec-plugin-timeout",
                                                  "max-header-bytes",
                                                  "strip-client-credentials",
                                                  "require-token",
                                                  "tls-cert-file",
                                                  "tls-private-key-file",
                                                  "client-ca-file",
                                                  "access-log",
                                                  "workers",
                                                  "log-level",
                                                  "health-port",
                                                  "health-bind-address",
                                                  "status-page-off-loopback",
                                                  "half-close-timeout"})},
  };
  return table;
}

std::vector<std::string_view> daemons_with_flag(std::string_view self, std::string_view name) {
  std::vector<std::string_view> out;
  for (const auto& d : daemon_flag_table()) {
    if (d.daemon == self) continue;
    if (std::find(d.flags.begin(), d.flags.end(), name) != d.flags.end()) out.push_back(d.daemon);
  }
  return out;
}

std::string daemon_list_text(const std::vector<std::string_view>& daemons) {
  std::string out;
  for (size_t i = 0; i < daemons.size(); ++i) {
    if (i > 0) out += i + 1 == daemons.size() ? " and " : ", ";
    out += daemons[i];
  }
  return out.empty() ? out : "a " + out;
}

}  // namespace konn::core::config
