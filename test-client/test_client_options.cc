#include "test-client/test_client_options.h"

#include "core/config/flag_parser.h"

namespace konn::testclient {

void TestClientOptions::register_flags(core::config::FlagParser& flags) {
  flags.add("mode", &mode,
            "Frontend protocol: grpc (ProxyService over HTTP/2) or http-connect (HTTP/1.1 "
            "CONNECT, for a proxy-server in --mode=http-connect)");
  flags.add("proxy-uds", &proxy_uds,
            "Unix socket of the proxy-server's frontend (plaintext); when set, "
            "--proxy-host/--proxy-port and the certificates are not used");
  flags.add("proxy-host", &proxy_host, "Host of the proxy-server's TCP frontend (mTLS)");
  flags.add("proxy-port", &proxy_port, "Port of the proxy-server's TCP frontend");
  flags.add("ca-cert", &ca_cert, "CA certificate that signed the proxy-server's certificate");
  flags.add("client-cert", &client_cert, "Client certificate presented to the proxy-server");
  flags.add("client-key", &client_key, "Private key of --client-cert");
  flags.add("request-host", &request_host, "Destination host the agent dials");
  flags.add("request-port", &request_port, "Destination port the agent dials");
  flags.add_custom(
      "request-path",
      [this](const std::string& v) {
        request_path = v;
        request_path_given = true;
        return std::string();
      },
      "Path fetched with HTTP GET through the tunnel; the body goes to stdout (default "
      "\"success\")");
  flags.add("pipe", &pipe,
            "Copy stdin into the tunnel and the tunnel to stdout (like nc) instead of a GET");
  flags.add("dial-timeout", &dial_timeout,
            "How long to wait for the DIAL_RSP (http-connect: for the reply to CONNECT)");
  flags.add("request-timeout", &request_timeout, "How long the GET may take after the dial");
}

std::vector<std::string> TestClientOptions::validate() const {
  std::vector<std::string> errors;
  if (mode != "grpc" && mode != "http-connect") {
    errors.push_back("--mode: \"" + mode + "\" is not grpc or http-connect");
  }
  if (request_host.empty()) errors.push_back("--request-host: must not be empty");
  if (request_port < 1 || request_port > 65535) {
    errors.push_back("--request-port: " + std::to_string(request_port) + " is not in 1..65535");
  }
  if (proxy_uds.empty()) {
    if (proxy_host.empty()) errors.push_back("--proxy-host: must not be empty without --proxy-uds");
    if (proxy_port < 1 || proxy_port > 65535) {
      errors.push_back("--proxy-port: " + std::to_string(proxy_port) + " is not in 1..65535");
    }
    if (client_cert.empty() != client_key.empty()) {
      errors.push_back("--client-cert/--client-key: give both or neither");
    }
  }
  if (pipe && request_path_given) {
    errors.push_back("--pipe: cannot be combined with --request-path");
  }
  if (dial_timeout.count() <= 0) errors.push_back("--dial-timeout: must be positive");
  if (request_timeout.count() <= 0) errors.push_back("--request-timeout: must be positive");
  return errors;
}

std::string TestClientOptions::request_address() const {
  std::string host = request_host;
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  return host + ":" + std::to_string(request_port);
}

}  // namespace konn::testclient
