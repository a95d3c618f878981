#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/ssl/context.hpp>

namespace konn::testclient {

// Test double of a proxy-server in --mode=http-connect, for the client's unit tests: answers one
// CONNECT per connection, on a unix socket (plain HTTP/1.1) and, when given certificates, on
// 127.0.0.1:<port 0> with mutual TLS. The behaviour is chosen by the CONNECT target's host:
//   echo:P     200, then echoes; after the client's EOF it closes once everything was echoed
//   early:P    200 with "early" in the same write as the head, then as echo
//   trickle:P  the 200 head one byte per write, then "after" and as echo
//   sink:P     200; counts bytes until the client's EOF, then sends the count and closes
//   flood:N    200; sends N bytes (byte i = i % 251) and closes
//   http:P     200; answers one GET with "hello via connect" (Content-Length), then closes
//   refuse:P   502 with body "dial tcp 127.0.0.1:P: connect: connection refused", then closes
//   garbage:P  a reply that is not HTTP
//   silent:P   never answers
// Port P is ignored, N is a byte count.
class FakeConnectServer {
 public:
  struct Tls {
    std::string cert_file, key_file, client_ca_file;
  };
  // Listens on `socket_path`; with `tls`, also on TCP.
  explicit FakeConnectServer(const std::string& socket_path, const Tls* tls = nullptr);
  ~FakeConnectServer();
  FakeConnectServer(const FakeConnectServer&) = delete;
  FakeConnectServer& operator=(const FakeConnectServer&) = delete;

  uint16_t tls_port() const { return tls_port_; }

  // What one connection sent before the tunnel: the CONNECT head's target and Host header.
  struct Request {
    std::string method, target, host;
  };
  std::vector<Request> requests() const;
  void record(Request r);

  // Connections whose client half-closed (EOF seen while the fake could still write).
  int half_closes() const { return half_closes_.load(); }
  void count_half_close() { half_closes_.fetch_add(1); }

 private:
  asio::io_context ctx_;
  asio::local::stream_protocol::acceptor unix_acceptor_;
  std::unique_ptr<asio::ip::tcp::acceptor> tcp_acceptor_;
  std::shared_ptr<asio::ssl::context> ssl_ctx_;
  uint16_t tls_port_ = 0;
  mutable std::mutex mu_;
  std::vector<Request> requests_;
  std::atomic<int> half_closes_{0};
  std::thread thread_;
};

}  // namespace konn::testclient
