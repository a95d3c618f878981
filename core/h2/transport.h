#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/buffer.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/ssl.hpp>
#include <asio/write.hpp>

namespace konn::core::h2 {

// The byte stream under one HTTP/2 connection: TCP, a unix socket, or TLS over either. Used by
// one thread (the Connection's); handlers run on executor().
class Transport {
 public:
  using IoHandler = std::function<void(std::error_code, size_t)>;
  // The bytes read, valid only during the call (empty with an error).
  using ReadHandler = std::function<void(std::error_code, std::string_view)>;
  virtual ~Transport() = default;
  virtual asio::any_io_executor executor() = 0;
  // TLS: the handshake, then a check that ALPN chose "h2" (an error otherwise). Plain: done at
  // once.
  virtual void async_handshake(bool server, std::function<void(std::error_code)> done) = 0;
  // Reads what has arrived: at least one byte, or an error. Where the bytes are read into is the
  // transport's business: no buffer is held for an idle connection where that can be helped.
  virtual void async_read(ReadHandler done) = 0;
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

// The buffer plain sockets read into: one per thread, so that an idle connection holds none.
// A read's bytes are handed to its handler and consumed there (HTTP/2 parses them at once), before
// the thread reads anything else.
std::vector<char>& thread_read_buffer();

// Plain sockets (TCP, unix): h2c with prior knowledge. A read waits for readability, then reads
// into the thread's buffer; after a read that filled it, the next one reads without waiting.
template <typename Socket>
class SocketTransport final : public Transport {
 public:
  explicit SocketTransport(Socket socket) : socket_(std::move(socket)) {
    std::error_code ignored;
    socket_.non_blocking(true, ignored);
  }
  asio::any_io_executor executor() override { return socket_.get_executor(); }
  void async_handshake(bool /*server*/, std::function<void(std::error_code)> done) override {
    done({});
  }
  void async_read(ReadHandler done) override {
    if (std::exchange(more_, false)) {
      // Posted, not called: the handler issues the next read, which must not nest in this one.
      asio::post(socket_.get_executor(),
                 [this, done = std::move(done)]() mutable { read_now(std::move(done)); });
      return;
    }
    socket_.async_wait(Socket::wait_read,
                       [this, done = std::move(done)](std::error_code ec) mutable {
                         if (ec) {
                           done(ec, {});
                           return;
                         }
                         read_now(std::move(done));
                       });
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
  void read_now(ReadHandler done) {
    if (!socket_.is_open()) {
      done(asio::error::operation_aborted, {});
      return;
    }
    std::vector<char>& buf = thread_read_buffer();
    std::error_code ec;
    const size_t n = socket_.read_some(asio::buffer(buf), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      async_read(std::move(done));  // readable was stale: wait again
      return;
    }
    if (ec) {
      done(ec, {});
      return;
    }
    more_ = n == buf.size();
    done({}, std::string_view(buf.data(), n));
  }

  Socket socket_;
  bool more_ = false;  // the last read filled the buffer: more is probably waiting
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
  // Into a buffer of this transport's: an asynchronous TLS read needs one while it waits. One
  // record (16 KiB) is the most a read returns, so the buffer is no larger.
  // Not zero-filled: its pages become resident only as far as records fill them.
  void async_read(ReadHandler done) override {
    if (!in_) in_.reset(new char[kTlsRecord]);
    stream_.async_read_some(asio::buffer(in_.get(), kTlsRecord),
                            [this, done = std::move(done)](std::error_code ec, size_t n) {
                              done(ec, ec ? std::string_view() : std::string_view(in_.get(), n));
                            });
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
  static constexpr size_t kTlsRecord = 16 * 1024;
  asio::ssl::stream<Socket> stream_;
  std::unique_ptr<char[]> in_;
  bool handshake_done_ = false;
};

using TcpTransport = SocketTransport<asio::ip::tcp::socket>;
using UnixTransport = SocketTransport<asio::local::stream_protocol::socket>;
using TcpTlsTransport = TlsTransport<asio::ip::tcp::socket>;
using UnixTlsTransport = TlsTransport<asio::local::stream_protocol::socket>;

}  // namespace konn::core::h2
