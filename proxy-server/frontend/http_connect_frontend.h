#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/ssl/context.hpp>
#include <asio/steady_timer.hpp>

#include "core/io/worker_pool.h"
#include "core/net/placed_acceptor.h"
#include "core/tls/reloading_context.h"

namespace konn::server {

class Router;

// The HTTP CONNECT frontend (`--mode=http-connect`): kube-apiserver's `HTTPConnect` egress over a
// unix socket (plain HTTP/1.1) or TCP with mTLS. One CONNECT per connection; the request target
// is the destination (the Host header, which kube-apiserver sets to 127.0.0.1, is ignored).
//
// Answers as upstream does, byte for byte on success: `HTTP/1.1 200 Connection Established` with
// no header and nothing after it, sent only after the agent's successful DIAL_RSP. Failures are
// plain-text 500 (no agent), 502 (dial refused, agent gone), 503 (agent out of files), 504 (dial
// timeout), 405 (not CONNECT), 400 (malformed request or target), 431 (head too large), each
// followed by closing the socket.
//
// Each connection lives on one worker io_context; packets from the agent stream are posted to it.
// A slow CONNECT client never blocks the agent stream or other tunnels (same per-tunnel rules as
// the gRPC frontend, docs/ARCHITECTURE.md).
class HttpConnectServer {
 public:
  // `place` chooses the worker of each new connection (ServerApp::place_frontend); the acceptor
  // starts on the pool's first worker.
  HttpConnectServer(Router& router, core::io::WorkerPool& pool,
                    std::function<core::io::WorkerPool::Placement()> place);
  ~HttpConnectServer();

  // Listen on a unix socket (mode 0770).
  void listen_unix(const std::string& path, bool delete_existing);
  // Listen on TCP with TLS (client certificates required when `tls` names a client CA). With
  // `reload` > 0 the certificate, key and CA files are checked that often and, when one changed,
  // new connections use a context built from the new files; open tunnels are untouched.
  // `ciphers` (an OpenSSL list, "" for the default) restricts TLS 1.2 suites.
  void listen_tls(const std::string& address, int port, core::tls::ServerTlsConfig tls,
                  std::chrono::nanoseconds reload, std::string ciphers,
                  std::function<void()> on_reload = {});
  int port() const { return port_; }
  // The placement `place` returns may have changed (an agent connected, say): an accept already
  // waiting is placed again (PlacedAcceptor::reconsider). Any thread.
  void reconsider_placement();
  void stop();

 private:
  std::shared_ptr<asio::ssl::context> current_tls();

  Router& router_;
  std::function<core::io::WorkerPool::Placement()> place_;
  asio::io_context& accept_ctx_;  // where the acceptor starts and certificates are re-read
  // Each follows the placement to its worker (core/net/placed_acceptor.h).
  std::shared_ptr<core::net::PlacedAcceptor<asio::local::stream_protocol>> unix_acceptor_;
  std::shared_ptr<core::net::PlacedAcceptor<asio::ip::tcp>> tcp_acceptor_;
  std::mutex tls_mu_;
  std::shared_ptr<asio::ssl::context> tls_;  // under tls_mu_: replaced on accept_ctx_, read on
                                             // whichever worker accepts
  std::unique_ptr<core::tls::ReloadingServerContext> tls_files_;
  int port_ = 0;
};

}  // namespace konn::server
