#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <asio/ssl/context.hpp>

#include "core/io/asio_compat.h"
#include "core/konnectivity/dial_error.h"
#include "core/konnectivity/proxy_connections.h"
#include "core/konnectivity/tunnel.h"
#include "core/konnectivity/upstream_options.h"

namespace konn::core::konnectivity {

struct DialResult {
  std::unique_ptr<Tunnel> tunnel;  // set on success
  DialError error;                 // otherwise why
};

// Opens tunnels to "host:port" destinations through one Konnectivity proxy-server, as
// kube-apiserver's egress selector does:
//  - grpc: one `/ProxyService/Proxy` call per tunnel on core/h2, the calls of one io thread
//    sharing one HTTP/2 connection (ProxyConnections: h2c over a unix socket, or TLS with a client
//    certificate over TCP), so a tunnel's packets are handled on its own thread;
//  - http-connect: one connection per tunnel (unix socket, or TCP with mutual TLS), `CONNECT
//    host:port HTTP/1.1`, and exactly 200 opens the tunnel (anything else fails with the status
//    and the body, which carries the agent's reason).
// Thread-safe: dial() may run on any io_context run by one thread; the tunnel stays on the
// caller's executor. Lifetime: destroy the Dialer before the io_contexts its tunnels ran on, and
// after those stopped running (or from their own threads): its destructor closes the gRPC
// mode's connections, ending their calls.
class Dialer {
 public:
  // Loads certificates; throws std::runtime_error naming what could not be used.
  explicit Dialer(const UpstreamOptions& options);
  // Closes the gRPC mode's connections (their calls end).
  ~Dialer();
  Dialer(const Dialer&) = delete;
  Dialer& operator=(const Dialer&) = delete;

  // Dials `address` ("host:port", a name is passed unresolved: the agent resolves it) within
  // `timeout` (also bounded by --konnectivity-dial-timeout).
  io::Awaitable<DialResult> dial(std::string address, std::chrono::milliseconds timeout);

  // Readiness: nullopt when the proxy-server accepts a connection within `timeout`, else why
  // not. Blocking; for a health thread.
  std::optional<std::string> probe(std::chrono::milliseconds timeout) const;

  const UpstreamOptions& options() const { return options_; }
  // gRPC calls currently open (tests, metrics).
  size_t open_streams() const;
  // gRPC mode's HTTP/2 connections made so far (tests).
  size_t connections_made() const;

 private:
  io::Awaitable<DialResult> dial_http_connect(std::string address,
                                              std::chrono::milliseconds timeout);

  const UpstreamOptions options_;
  std::string unix_path_;  // empty: TCP
  std::string host_;       // TCP
  uint16_t port_ = 0;
  std::string server_name_;
  std::unique_ptr<ProxyConnections> connections_;  // grpc mode
  std::shared_ptr<asio::ssl::context> tls_;        // http-connect over TCP
};

}  // namespace konn::core::konnectivity
