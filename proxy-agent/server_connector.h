#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/ssl/context.hpp>

#include "core/h2/transport.h"
#include "core/io/asio_compat.h"
#include "proxy-agent/egress_proxy.h"

namespace konn::agent {

// One proxy-server to connect to, and how.
struct ServerConnectTarget {
  std::string host;  // the proxy-server's name or IP, IPv6 without brackets
  int port = 0;
  std::optional<EgressProxy> proxy;  // CONNECT host:port through it when set
  // Client context (make_server_client_context): trusted CA, client certificate and key. SNI and
  // the certificate's name are checked against `host`.
  std::shared_ptr<asio::ssl::context> tls;
  // The ALPN ids offered, in order (AgentOptions::alpn_offered); empty: "h2" only. The server
  // must pick "h2".
  std::vector<std::string> alpn;
  // --server-connect-timeout: bounds TCP connect, CONNECT and TLS handshake together.
  std::chrono::milliseconds timeout{20000};

  // host:port, IPv6 in brackets.
  std::string address() const;
};

struct ServerConnectResult {
  // The TLS stream to the server, handshake done and ALPN "h2" checked (a Connection's start()
  // does not handshake again); null on failure.
  std::unique_ptr<core::h2::Transport> transport;
  // On failure, in plain words: "dial tcp 10.0.0.1:8091: connect: connection refused",
  // "TLS handshake with localhost:8091: certificate verify failed (hostname mismatch)",
  // "no HTTP/2 (ALPN h2) from localhost:8091", "timed out after 20s (TLS handshake with ...)".
  std::string error;
  // Set on every failure through a proxy, with the reason counted in
  // konn_agent_egress_proxy_failures_total: Auth, Refused or ServerUnreachable for the proxy's
  // answer, ProxyUnreachable, Timeout, or Other (TLS or HTTP/2 with the server, a malformed or
  // missing answer) whose text may be empty.
  std::optional<ProxyFailure> proxy_failure;
};

// Connects to the proxy-server `t` names: TCP (TCP_NODELAY) to it, or to t.proxy and `CONNECT
// host:port` through it (Proxy-Authorization when the proxy has credentials), then the TLS
// handshake. Within t.timeout altogether; when it passes, the socket is closed and the result is a
// timeout. Runs on `ex`, which must be one thread (or a strand); never throws.
core::io::Awaitable<ServerConnectResult> connect_server(asio::any_io_executor ex,
                                                        ServerConnectTarget t);

// The client TLS context for proxy-servers from --ca-cert (the system's roots when empty),
// --agent-cert and --agent-key (a client certificate only when both are given). Throws
// std::runtime_error naming the file that cannot be read or used.
std::shared_ptr<asio::ssl::context> make_server_client_context(const std::string& ca_cert,
                                                               const std::string& agent_cert,
                                                               const std::string& agent_key);

}  // namespace konn::agent
