#include "kubeproxy-http/kubeproxy_options.h"

#include <regex>

#include <spdlog/spdlog.h>

#include "core/config/validation.h"

namespace konn::kubeproxy {
namespace {

void check_patterns(const char* flag, const std::vector<std::string>& patterns,
                    std::vector<std::string>& errors) {
  for (const auto& p : patterns) {
    try {
      std::regex re(p, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      errors.push_back(std::string("--") + flag + ": invalid regular expression \"" + p +
                       "\": " + e.what());
    }
  }
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

void KubeproxyOptions::register_flags(core::config::FlagParser& f) {
  f.add("port,p", &port, "The port on which to run the proxy. Set to 0 to pick a random port.");
  f.add("address", &address, "The IP address on which to serve on.");
  f.add("unix-socket,u", &unix_socket, "Unix socket on which to run the proxy.");
  f.add("api-prefix", &api_prefix, "Prefix to serve the proxied API under.");
  f.add("www,w", &www,
        "Also serve static files from the given directory under the specified prefix.");
  f.add("www-prefix,P", &www_prefix,
        "Prefix to serve static files under, if static file directory is specified.");
  f.add("accept-paths", &accept_paths,
        "Regular expression for paths that the proxy should accept.");
  f.add("reject-paths", &reject_paths,
        "Regular expression for paths that the proxy should reject. Paths specified here will be "
        "rejected even accepted by --accept-paths.");
  f.add("accept-hosts", &accept_hosts,
        "Regular expression for hosts that the proxy should accept.");
  f.add("reject-methods", &reject_methods,
        "Regular expression for HTTP methods that the proxy should reject (example "
        "--reject-methods='POST,PUT,PATCH').");
  f.add("disable-filter", &disable_filter,
        "If true, disable request filtering in the proxy. This is dangerous, and can leave you "
        "vulnerable to XSRF attacks, when used with an accessible port.");
  f.add("keepalive", &keepalive,
        "keepalive specifies the keep-alive period for an active network connection. Set to 0 to "
        "disable keepalive.");
  f.add(
      "append-server-path", &append_server_path,
      "If true, enables automatic path appending of the kube context server path to each request.");

  f.add("kubeconfig", &kube.kubeconfig, "Path to the kubeconfig file to use for CLI requests.");
  f.add("context", &kube.context, "The name of the kubeconfig context to use");
  f.add("cluster", &kube.cluster, "The name of the kubeconfig cluster to use");
  f.add("user", &kube.user, "The name of the kubeconfig user to use");
  f.add("server,s", &kube.server, "The address and port of the Kubernetes API server");
  f.add("token", &kube.token, "Bearer token for authentication to the API server");
  f.add("certificate-authority", &kube.certificate_authority,
        "Path to a cert file for the certificate authority");
  f.add("client-certificate", &kube.client_certificate,
        "Path to a client certificate file for TLS");
  f.add("client-key", &kube.client_key, "Path to a client key file for TLS");
  f.add("insecure-skip-tls-verify", &kube.insecure_skip_tls_verify,
        "If true, the server's certificate will not be checked for validity. This will make your "
        "HTTPS connections insecure");
  f.add("tls-server-name", &kube.tls_server_name,
        "Server name to use for server certificate validation. If it is not provided, the hostname "
        "used to contact the server is used");
  f.add("as", &kube.as,
        "Username to impersonate for the operation. User could be a regular user or a service "
        "account in a namespace.");
  f.add("as-group", &kube.as_groups,
        "Group to impersonate for the operation, this flag can be repeated to specify multiple "
        "groups.");

  f.add("mode", &mode,
        "kubeproxy-http: \"proxy\" (kubectl proxy) or \"connect\" (HTTP CONNECT forward proxy for "
        "HTTPS_PROXY / proxy-url).");
  f.add("allowed-destinations", &allowed_destinations,
        "kubeproxy-http, connect mode: regular expressions over host:port that CONNECT may "
        "reach.");
  f.set_default_text("allowed-destinations", "any");
  f.add("proxy-user", &proxy_user,
        "kubeproxy-http, connect mode: \"user:password\" callers must send as Proxy-Authorization: "
        "Basic (407 otherwise).");
  f.add("dial-timeout", &dial_timeout,
        "kubeproxy-http: timeout for connecting to the apiserver or a CONNECT destination.");
  f.add(
      "request-header-timeout", &request_header_timeout,
      "kubeproxy-http: time a client has to send a complete request head (0 = none, as kubectl).");
  f.add("exec-plugin-timeout", &exec_plugin_timeout,
        "kubeproxy-http: how long a kubeconfig exec credential plugin may run before it is "
        "killed and the requests waiting for it get 502 (kubectl waits forever).");
  f.add("max-header-bytes", &max_header_bytes,
        "kubeproxy-http: largest request head accepted; larger gets 431.");
  f.add("strip-client-credentials", &strip_client_credentials,
        "kubeproxy-http: drop callers' Authorization and Impersonate-* headers (kubectl passes "
        "them through).");
  f.add("require-token", &require_token,
        "kubeproxy-http: callers must send \"Authorization: Bearer <token>\" (401 otherwise); the "
        "header is then replaced by the kubeconfig credential.");
  f.add("tls-cert-file", &tls_cert_file,
        "kubeproxy-http: serve TLS on the listener with this certificate.");
  f.add("tls-private-key-file", &tls_key_file, "kubeproxy-http: key of --tls-cert-file.");
  f.add("client-ca-file", &client_ca_file,
        "kubeproxy-http: callers must present a client certificate signed by this CA (requires "
        "--tls-cert-file).");
  f.add("access-log", &access_log, "kubeproxy-http: log one line per request.");
  f.add("workers", &workers, "kubeproxy-http: I/O threads (0 = one per core).");
  f.add("log-level", &log_level,
        "kubeproxy-http: trace, debug, info, warn, error, or a klog number.");
  f.add("health-port", &health_port,
        "kubeproxy-http: port of the /healthz, /readyz and /metrics listener (0: any free port, "
        "-1: none). In connect mode a taken default port is logged and skipped; a port that was "
        "given must be bound.");
  f.set_default_text("health-port", "8097 in connect mode, none in proxy mode");
  f.add("health-bind-address", &health_bind_address,
        "kubeproxy-http: bind address of the health listener.");
  f.set_default_text("health-bind-address",
                     "127.0.0.1 in proxy mode, every interface in connect mode");
  f.add("status-page-off-loopback", &status_page_off_loopback,
        "kubeproxy-http: serve /status and /status.json on a health listener bound beyond "
        "loopback (else 403).");
  konnectivity.register_flags(f);
  f.add("half-close-timeout", &half_close_timeout,
        "kubeproxy-http: close a CONNECT tunnel (connect mode) or an upgraded connection (101) "
        "whose one side finished sending (half-close) once nothing moved for this long "
        "(0 = never).");
}

std::vector<std::string> KubeproxyOptions::validate(bool port_set) const {
  std::vector<std::string> errors;
  core::config::check_range(errors, "--port", port, 0, 65535);
  if (!unix_socket.empty() && port_set && port != 8001) {
    errors.push_back("--unix-socket: don't specify both --unix-socket and --port");
  }
  if (mode != "proxy" && mode != "connect") {
    errors.push_back("--mode: must be \"proxy\" or \"connect\", got \"" + mode + "\"");
  }
  if (!proxy_user.empty() && proxy_user.find(':') == std::string::npos) {
    errors.push_back("--proxy-user: want user:password");
  }
  if (tls_cert_file.empty() != tls_key_file.empty()) {
    errors.push_back("--tls-cert-file and --tls-private-key-file must be given together");
  }
  if (!client_ca_file.empty() && tls_cert_file.empty()) {
    errors.push_back("--client-ca-file: requires --tls-cert-file");
  }
  if (exec_plugin_timeout.count() <= 0) errors.push_back("--exec-plugin-timeout: must be positive");
  if (max_header_bytes < 1024) errors.push_back("--max-header-bytes: must be at least 1024");
  if (workers < 0) errors.push_back("--workers: must not be negative");
  core::config::check_range(errors, "--health-port", health_port, -1, 65535);
  konnectivity.validate(errors);
  if (konnectivity.enabled() && mode != "connect") {
    errors.push_back("--konnectivity-address: only with --mode=connect");
  }
  if (api_prefix.empty() || api_prefix.front() != '/') {
    errors.push_back("--api-prefix: must start with /");
  }
  check_patterns("accept-paths", accept_paths, errors);
  check_patterns("reject-paths", reject_paths, errors);
  check_patterns("accept-hosts", accept_hosts, errors);
  check_patterns("reject-methods", reject_methods, errors);
  check_patterns("allowed-destinations", allowed_destinations, errors);
  return errors;
}

int KubeproxyOptions::effective_health_port() const {
  if (mode == "proxy" && !health_port_set) return -1;
  return health_port;
}

std::string KubeproxyOptions::effective_health_bind_address() const {
  if (!health_bind_address.empty() || mode != "proxy") return health_bind_address;
  return "127.0.0.1";
}

void KubeproxyOptions::print(spdlog::logger& log) const {
  log.info("mode={} address={} port={} unix-socket={} api-prefix={} www={} www-prefix={}", mode,
           address, port, unix_socket, api_prefix, www, www_prefix);
  log.info("accept-paths={} reject-paths={} accept-hosts={} reject-methods={} disable-filter={}",
           join(accept_paths), join(reject_paths), join(accept_hosts), join(reject_methods),
           disable_filter);
  log.info(
      "request-header-timeout={} exec-plugin-timeout={} max-header-bytes={} "
      "strip-client-credentials={} access-log={} workers={} allowed-destinations={} proxy-user={}",
      core::config::format_go_duration(request_header_timeout),
      core::config::format_go_duration(exec_plugin_timeout), max_header_bytes,
      strip_client_credentials, access_log, workers, join(allowed_destinations),
      proxy_user.empty() ? "(none)" : "(set)");
  int hp = effective_health_port();
  std::string hb = effective_health_bind_address();
  log.info("health-port={} health-bind-address={} konnectivity: {}",
           hp < 0 ? std::string("(none)") : std::to_string(hp), hb.empty() ? "*" : hb,
           konnectivity.describe());
}

}  // namespace konn::kubeproxy
