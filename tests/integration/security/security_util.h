#pragma once

#include <chrono>
#include <string>

#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>

#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace konn::e2e {

// An HTTP CONNECT client on the server's unix socket, as kube-apiserver's HTTPConnect egress.
class UnixConnectClient {
 public:
  // Connects to `uds`; false when nothing listens.
  bool open(const std::string& uds);
  // Sends `request` as is (no framing added).
  bool send(const std::string& request);
  // Reads the answer's head (status line and headers); "" when the connection closed first.
  std::string read_head(std::chrono::milliseconds timeout);
  // Reads until the server closes the connection (or `timeout`); what came.
  std::string read_to_end(std::chrono::milliseconds timeout);
  // Whether the server closed the connection within `timeout` (reads and discards).
  bool closed_within(std::chrono::milliseconds timeout);
  asio::local::stream_protocol::socket& socket() { return socket_; }

 private:
  asio::io_context ctx_;
  asio::local::stream_protocol::socket socket_{ctx_};
};

// The status line of a CONNECT to `target` ("HTTP/1.1 200 Connection Established").
std::string connect_status(UnixConnectClient& c, const std::string& target);

// A leaf certificate signed by the test CA, for `cn` with `san` ("DNS:node-a,IP:10.0.0.5"),
// usable as a client certificate. Returns {crt, key} paths in `dir`.
std::pair<std::string, std::string> issue_client_cert(const testsupport::TestCerts& certs,
                                                      const testsupport::TempDir& dir,
                                                      const std::string& name,
                                                      const std::string& cn,
                                                      const std::string& san);

// One `openssl s_client` handshake towards 127.0.0.1:`port` with `options` (e.g. "-tls1_1"),
// presenting the test client certificate; its output. `ok` tells whether a session was
// established (a cipher other than "(NONE)" negotiated).
struct Handshake {
  bool ok = false;
  std::string output;
};
Handshake openssl_handshake(uint16_t port, const std::string& options,
                            const testsupport::TestCerts& certs);

}  // namespace konn::e2e
