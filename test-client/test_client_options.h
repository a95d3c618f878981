#pragma once

#include <string>
#include <vector>

#include "core/config/duration.h"

namespace konn::core::config {
class FlagParser;
}

namespace konn::testclient {

// Flags of proxy-test-client (names follow upstream's test client where one exists).
struct TestClientOptions {
  // How to talk to the frontend: "grpc" (ProxyService/Proxy over HTTP/2) or "http-connect"
  // (HTTP/1.1 CONNECT, for a proxy-server in --mode=http-connect).
  std::string mode = "grpc";
  // Frontend: a unix socket (plaintext) or TCP with mTLS.
  std::string proxy_uds;
  std::string proxy_host = "localhost";
  int proxy_port = 8090;
  std::string ca_cert;
  std::string client_cert;
  std::string client_key;

  // Destination, dialled by the agent.
  std::string request_host = "localhost";
  int request_port = 8000;
  std::string request_path = "success";
  bool request_path_given = false;  // --request-path appeared (for the --pipe conflict)
  bool pipe = false;                // copy stdin → tunnel and tunnel → stdout instead of a GET

  core::config::Duration dial_timeout = std::chrono::seconds(10);
  core::config::Duration request_timeout = std::chrono::seconds(60);

  void register_flags(core::config::FlagParser& flags);
  // Every problem at once, each naming its flag.
  std::vector<std::string> validate() const;

  bool http_connect() const { return mode == "http-connect"; }

  // "host:port" of the destination (IPv6 literals bracketed).
  std::string request_address() const;
};

}  // namespace konn::testclient
