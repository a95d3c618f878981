#pragma once

#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/buffer.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/ssl.hpp>
#include <asio/write.hpp>

namespace konn::core::h2 {

// The byte stream under one HTTP/2 connection: TCP, a unix socket, or TLS over either. Used by
// one thread (the Connection's); handlers run on executor().
class Transport {
 public:
  using IoHandler = std::function<void(std::error_code, size_t)>;
  virtual ~Transport() = default;
  virtual asio::any_io_executor executor() = 0;
  // TLS: the handshake, then a check that ALPN chose "h2" (an error otherwise). Plain: done at
  // once.
  virtual void async_handshake(bool server, std::function<void(std::error_code)> done) = 0;
  virtual void async_read_some(asio::mutable_buffer buf, IoHandler done) = 0;
  // Writes all of `buf`.
  virtual void async_write(asio::const_buffer buf, IoHandler done) = 0;
  // Closes the descriptor; pending operations complete with operation_aborted.
  virtual void close() = 0;
  virtual bool is_tls() const = 0;
};

// Server contexts: answer ALPN with "h2" when the client offers it, and refuse the handshake
// when it does not (grpc-go refuses peers without h2 in the same way).
void enable_h2_alpn(asio::ssl::context& ctx);
// Client streams: offer "h2" only.
void offer_h2_alpn(SSL* ssl);
// The protocol ALPN chose on `ssl` ("" when none).
std::string alpn_selected(SSL* ssl);

// Plain sockets (TCP, unix): h2c with prior knowledge.
template <typename Socket>
class SocketTransport final : public Transport {
 public:
  explicit SocketTransport(Socket socket) : socket_(std::move(socket)) {}
  asio::any_io_executor executor() override { return socket_.get_executor(); }
  void async_handshake(bool /*server*/, std::function<void(std::error_code)> done) override {
    done({});
  }
  void async_read_some(asio::mutable_buffer buf, IoHandler done) override {
    socket_.async_read_some(buf, std::move(done));
  }
  void async_write(asio::const_buffer buf, IoHandler done) override {
    asio::async_write(socket_, buf, std::move(done));
  }
  void close() override {
    std::error_code ignored;
    socket_.close(ignored);
  }
  bool is_tls() const override { return false; }
  Socket& socket() { return socket_; }

 private:
  Socket socket_;
};

// TLS over a socket (asio::ssl::stream). A client stream is given ALPN "h2" by the transport.
// A transport remembers a handshake that succeeded: later async_handshake calls complete at once.
// So a client may handshake first, under its own deadline and with its own error reporting, and
// then hand the transport to a Connection, whose start() does not handshake again.
template <typename Socket>
class TlsTransport final : public Transport {
 public:
  explicit TlsTransport(asio::ssl::stream<Socket> stream) : stream_(std::move(stream)) {}
  asio::any_io_executor executor() override { return stream_.get_executor(); }
  void async_handshake(bool server, std::function<void(std::error_code)> done) override {
    if (handshake_done_) {
      done({});
      return;
    }
    if (!server) offer_h2_alpn(stream_.native_handle());
    stream_.async_handshake(
        server ? asio::ssl::stream_base::server : asio::ssl::stream_base::client,
        [this, done = std::move(done)](std::error_code ec) {
          if (!ec && alpn_selected(stream_.native_handle()) != "h2") {
            ec = std::make_error_code(std::errc::protocol_not_supported);
          }
          handshake_done_ = !ec;
          done(ec);
        });
  }
  bool handshake_done() const { return handshake_done_; }
  void async_read_some(asio::mutable_buffer buf, IoHandler done) override {
    stream_.async_read_some(buf, std::move(done));
  }
  void async_write(asio::const_buffer buf, IoHandler done) override {
    asio::async_write(stream_, buf, std::move(done));
  }
  void close() override {
    std::error_code ignored;
    stream_.lowest_layer().close(ignored);
  }
  bool is_tls() const override { return true; }
  // The TLS stream, e.g. to read the peer's verification result after a failed handshake.
  asio::ssl::stream<Socket>& stream() { return stream_; }

 private:
  asio::ssl::stream<Socket> stream_;
  bool handshake_done_ = false;
};

using TcpTransport = SocketTransport<asio::ip::tcp::socket>;
using UnixTransport = SocketTransport<asio::local::stream_protocol::socket>;
using TcpTlsTransport = TlsTransport<asio::ip::tcp::socket>;
using UnixTlsTransport = TlsTransport<asio::local::stream_protocol::socket>;

}  // namespace konn::core::h2
