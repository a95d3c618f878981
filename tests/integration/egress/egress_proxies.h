#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/process_runner.h"
#include "tests/support/temp_dir.h"

namespace konn::e2e {

using namespace std::chrono_literals;

// How to configure an HTTP proxy of the egress tests.
struct ProxyConfig {
  // Basic authentication: required when `user` is not empty.
  std::string user;
  std::string password;
  // squid only: CONNECT to these ports is refused (403) by an ACL.
  std::vector<uint16_t> denied_ports;
  // tinyproxy only (ConnectPort, it has no deny form): CONNECT allowed only to these ports, 403
  // for the others (empty: every port).
  std::vector<uint16_t> allowed_ports;
};

// squid (Debian `squid`), started in the foreground on a free 127.0.0.1 port with a config
// written into its own temp dir: no cache, its own pid, cache and access logs, CONNECT allowed to
// any port from loopback, Basic authentication through basic_ncsa_auth with a password file
// written here (openssl passwd -apr1). The constructor returns once the port accepts; it throws
// with squid's log when squid is missing or does not come up.
class SquidProxy {
 public:
  explicit SquidProxy(const ProxyConfig& config);
  ~SquidProxy();
  SquidProxy(const SquidProxy&) = delete;
  SquidProxy& operator=(const SquidProxy&) = delete;

  uint16_t port() const { return port_; }
  // http://127.0.0.1:<port>, with `userinfo@` when given (already percent-encoded).
  std::string url(const std::string& userinfo = "") const;
  // The access log so far: squid writes a CONNECT's line when its tunnel ends.
  std::string access_log() const;

 private:
  testsupport::TempDir dir_{"konn-squid"};
  uint16_t port_;
  std::unique_ptr<testsupport::Process> process_;
};

// tinyproxy (Debian `tinyproxy`), in the foreground on a free 127.0.0.1 port, config and log in
// its own temp dir, BasicAuth when a user is given. Its log (LogLevel Connect) has a line
// "Request ...: CONNECT host:port HTTP/1.1" when the CONNECT arrives.
class Tinyproxy {
 public:
  explicit Tinyproxy(const ProxyConfig& config);
  ~Tinyproxy();
  Tinyproxy(const Tinyproxy&) = delete;
  Tinyproxy& operator=(const Tinyproxy&) = delete;

  uint16_t port() const { return port_; }
  std::string url(const std::string& userinfo = "") const;
  std::string log() const;

 private:
  testsupport::TempDir dir_{"konn-tinyproxy"};
  uint16_t port_;
  std::unique_ptr<testsupport::Process> process_;
};

// A TCP listener on 127.0.0.1 that completes connections (the kernel's backlog) and never reads
// or answers: a proxy that never answers the CONNECT.
class SilentListener {
 public:
  SilentListener();
  ~SilentListener();
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace konn::e2e
