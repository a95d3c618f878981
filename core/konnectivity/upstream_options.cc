#include "core/konnectivity/upstream_options.h"

#include "core/net/endpoint.h"

namespace konn::core::konnectivity {

bool UpstreamOptions::is_unix(std::string* path) const {
  std::string p;
  if (address.rfind("unix:", 0) == 0) {
    p = address.substr(5);
  } else if (!address.empty() && (address.front() == '/' || address.front() == '.')) {
    p = address;
  } else {
    return false;
  }
  if (path != nullptr) *path = p;
  return true;
}

void UpstreamOptions::register_flags(config::FlagParser& p) {
  p.add("konnectivity-address", &address,
        "Dial destinations through this Konnectivity proxy-server: a unix socket (unix:/path or "
        "/path) or host:port (TCP with mutual TLS). Empty: dial directly");
  p.add("konnectivity-mode", &mode,
        "How to talk to the proxy-server: grpc (ProxyService) or http-connect");
  p.add("konnectivity-ca-cert", &ca_cert, "CA certificate of the proxy-server (TCP)");
  p.add("konnectivity-client-cert", &client_cert, "Client certificate for the proxy-server (TCP)");
  p.add("konnectivity-client-key", &client_key, "Key of --konnectivity-client-cert");
  p.add("konnectivity-server-name", &server_name,
        "Name to verify in the proxy-server's certificate");
  p.set_default_text("konnectivity-server-name", "the host of --konnectivity-address");
  p.add("konnectivity-dial-timeout", &dial_timeout,
        "Time allowed for one dial through the proxy-server (until the agent answered)");
}

void UpstreamOptions::validate(std::vector<std::string>& errors) const {
  if (mode != "grpc" && mode != "http-connect") {
    errors.push_back("--konnectivity-mode: must be grpc or http-connect, got \"" + mode + "\"");
  }
  if (dial_timeout <= config::Duration::zero()) {
    errors.push_back("--konnectivity-dial-timeout: must be positive");
  }
  if (!enabled()) return;
  std::string path;
  if (is_unix(&path)) {
    if (path.empty()) errors.push_back("--konnectivity-address: empty unix socket path");
    return;
  }
  auto hp = net::parse_host_port(address);
  if (!hp || hp->host.empty() || hp->port == 0) {
    errors.push_back("--konnectivity-address: want unix:/path, /path or host:port, got \"" +
                     address + "\"");
  }
  if (ca_cert.empty() || client_cert.empty() || client_key.empty()) {
    errors.push_back(
        "--konnectivity-ca-cert, --konnectivity-client-cert and --konnectivity-client-key are "
        "required with a TCP --konnectivity-address (the proxy-server frontend uses mutual TLS)");
  }
}

std::string UpstreamOptions::describe() const {
  if (!enabled()) return "off";
  std::string out = mode + " via " + address;
  if (!is_unix()) {
    out += " (mTLS, server name " +
           (server_name.empty() ? std::string("from the address") : server_name) + ")";
  }
  out += ", dial timeout " + config::format_go_duration(dial_timeout);
  return out;
}

}  // namespace konn::core::konnectivity
