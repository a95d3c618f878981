#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "core/config/duration.h"
#include "core/config/flag_parser.h"

namespace konn::core::konnectivity {

// Where and how a daemon (socks5, kubeproxy-http) dials through a Konnectivity proxy-server. The
// same `--konnectivity-*` flags (and YAML keys) in every daemon that has an upstream. Off while
// `address` is empty.
struct UpstreamOptions {
  // "unix:/path", "/path" (a unix socket, plaintext: h2c in grpc mode, HTTP/1.1 in http-connect
  // mode) or "host:port" (TCP with mutual TLS).
  std::string address;
  std::string mode = "grpc";  // "grpc" (ProxyService/Proxy) or "http-connect"
  std::string ca_cert;        // TCP: trusted CA of the proxy-server's certificate
  std::string client_cert;    // TCP: our client certificate and key (mTLS)
  std::string client_key;
  std::string server_name;  // TCP: name checked in the server certificate (default: the host)
  // Time for one dial: proxy-server connection, DIAL_REQ → DIAL_RSP (or CONNECT → 200). 30s is
  // konnectivity-client's backstop; the agent's own dial timeout (5s) usually answers first.
  config::Duration dial_timeout = std::chrono::seconds(30);

  bool enabled() const { return !address.empty(); }
  // True for a unix socket address; `path` receives the path.
  bool is_unix(std::string* path = nullptr) const;
  bool grpc() const { return mode == "grpc"; }

  // Registers --konnectivity-address, -mode, -ca-cert, -client-cert, -client-key, -server-name,
  // -dial-timeout.
  void register_flags(config::FlagParser& p);
  // Appends every problem (each naming its flag) to `errors`.
  void validate(std::vector<std::string>& errors) const;
  // One line for the startup log ("off" when disabled).
  std::string describe() const;
};

}  // namespace konn::core::konnectivity
