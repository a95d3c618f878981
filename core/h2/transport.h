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

#include "core/io/read_buffer.h"

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
  // Waits until the peer has sent something (or closed), reading nothing: a server takes a TLS
  // handshake slot only for a client that spoke. Done at once where there is nothing to wait on.
  virtual void async_wait_readable(std::function<void(std::error_code)> done) { done({}); }
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
// Client streams: offer `protos`, in this order (none when empty). False if OpenSSL refused the
// list (an id empty or longer than 255 bytes).
bool offer_alpn(SSL* ssl, const std::vector<std::string>& protos);
// The protocol ALPN chose on `ssl` ("" when none).
std::string alpn_selected(SSL* ssl);

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
  void async_wait_readable(std::function<void(std::error_code)> done) override {
    socket_.async_wait(Socket::wait_read, std::move(done));
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
    std::vector<char>& buf = io::thread_read_buffer();
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

// One TLS session on a non-blocking descriptor that the caller's socket owns: OpenSSL reads and
// writes the descriptor itself (recv and send with MSG_NOSIGNAL, through a BIO of ours), so
// there is no BIO pair and no staging buffer between the socket and OpenSSL. Each call does what
// it can without blocking and says what it would need to go on. Errors come as asio's: eof for
// close_notify, stream_truncated for an end without it, the errno otherwise, or OpenSSL's reason.
class TlsEngine {
 public:
  // Takes a new SSL of `ctx` on descriptor `fd` (owned by the caller's socket). Throws
  // std::system_error when OpenSSL cannot make one.
  TlsEngine(SSL_CTX* ctx, int fd);
  TlsEngine(const TlsEngine&) = delete;
  TlsEngine& operator=(const TlsEngine&) = delete;
  ~TlsEngine();
  SSL* ssl() const { return ssl_; }

  // What one call of OpenSSL asks for next.
  enum class Want { Nothing, Read, Write };
  // One handshake step: Nothing with `ec` set (failed) or clear (done), or what to wait for.
  Want handshake(bool server, std::error_code& ec);
  // Decrypts what the socket and OpenSSL hold into buf (up to len): Nothing with n > 0 (bytes
  // read) or with `ec` set (an error, eof included); or what to wait for (n == 0).
  Want read(char* buf, size_t len, size_t& n, std::error_code& ec);
  // Encrypts and sends from buf: Nothing with n bytes taken (at least one record's worth, or all)
  // or with `ec` set; or what to wait for.
  Want write(const char* buf, size_t len, size_t& n, std::error_code& ec);
  // OpenSSL holds bytes it read but did not hand out yet.
  bool pending() const;

 private:
  Want want(int ret, std::error_code& ec);
  SSL* ssl_;
  bool started_ = false;
};

// TLS over a socket, on a TlsEngine. A read waits for readability, then SSL_read decrypts into
// the thread's buffer, every record OpenSSL holds in one call; OpenSSL reads ahead (one recv per
// wake-up, not one per record header and body) and holds record buffers only while a record is
// in flight (SSL_MODE_RELEASE_BUFFERS). A write runs SSL_write until the socket is full, then
// waits for writability. A client transport offers ALPN "h2", or the list given to offer_alpn().
// A transport remembers a handshake that succeeded: later async_handshake calls complete at once.
// So a client may handshake first, under its own deadline and with its own error reporting, and
// then hand the transport to a Connection, whose start() does not handshake again.
template <typename Socket>
class TlsTransport final : public Transport {
 public:
  TlsTransport(Socket socket, asio::ssl::context& ctx)
      : socket_(std::move(socket)), engine_(ctx.native_handle(), socket_.native_handle()) {
    std::error_code ignored;
    socket_.non_blocking(true, ignored);
  }
  asio::any_io_executor executor() override { return socket_.get_executor(); }
  void async_handshake(bool server, std::function<void(std::error_code)> done) override {
    if (handshake_done_) {
      done({});
      return;
    }
    if (!server && !alpn_offered_) offer_h2_alpn(engine_.ssl());
    handshake_step(server, std::move(done));
  }
  void async_wait_readable(std::function<void(std::error_code)> done) override {
    socket_.async_wait(Socket::wait_read, std::move(done));
  }
  // A client transport offers `protos` instead of "h2" alone (the handshake still fails unless
  // the server picks "h2"). Call before async_handshake; false if OpenSSL refused the list.
  bool offer_alpn(const std::vector<std::string>& protos) {
    alpn_offered_ = core::h2::offer_alpn(engine_.ssl(), protos);
    return alpn_offered_;
  }
  bool handshake_done() const { return handshake_done_; }
  void async_read(ReadHandler done) override {
    if (std::exchange(more_, false) || engine_.pending()) {
      // Posted, not called: the handler issues the next read, which must not nest in this one.
      asio::post(socket_.get_executor(),
                 [this, done = std::move(done)]() mutable { read_now(std::move(done)); });
      return;
    }
    wait_then_read(Socket::wait_read, std::move(done));
  }
  void async_write(asio::const_buffer buf, IoHandler done) override {
    write_now(static_cast<const char*>(buf.data()), buf.size(), 0, std::move(done));
  }
  void close() override {
    std::error_code ignored;
    socket_.close(ignored);
  }
  bool is_tls() const override { return true; }
  // The TLS session, e.g. to read the peer's verification result after a failed handshake.
  SSL* native_handle() const { return engine_.ssl(); }

 private:
  // A wait fails only when the socket was closed (operation_aborted).
  static typename Socket::wait_type wait_for(TlsEngine::Want w) {
    return w == TlsEngine::Want::Read ? Socket::wait_read : Socket::wait_write;
  }

  void handshake_step(bool server, std::function<void(std::error_code)> done) {
    if (!socket_.is_open()) {
      done(asio::error::operation_aborted);
      return;
    }
    std::error_code ec;
    const TlsEngine::Want w = engine_.handshake(server, ec);
    if (w == TlsEngine::Want::Nothing) {
      if (!ec && alpn_selected(engine_.ssl()) != "h2") {
        ec = std::make_error_code(std::errc::protocol_not_supported);
      }
      handshake_done_ = !ec;
      asio::post(socket_.get_executor(), [done = std::move(done), ec] { done(ec); });
      return;
    }
    socket_.async_wait(wait_for(w),
                       [this, server, done = std::move(done)](std::error_code e) mutable {
                         if (e) {
                           done(e);
                           return;
                         }
                         handshake_step(server, std::move(done));
                       });
  }

  void wait_then_read(typename Socket::wait_type what, ReadHandler done) {
    socket_.async_wait(what, [this, done = std::move(done)](std::error_code e) mutable {
      if (e) {
        done(e, {});
        return;
      }
      read_now(std::move(done));
    });
  }

  void read_now(ReadHandler done) {
    if (!socket_.is_open()) {
      done(asio::error::operation_aborted, {});
      return;
    }
    std::vector<char>& buf = io::thread_read_buffer();
    size_t got = 0;
    std::error_code ec;
    TlsEngine::Want w = TlsEngine::Want::Nothing;
    // Every record OpenSSL already holds goes out in this one call.
    while (got < buf.size()) {
      size_t n = 0;
      w = engine_.read(buf.data() + got, buf.size() - got, n, ec);
      got += n;
      if (w != TlsEngine::Want::Nothing || ec || !engine_.pending()) break;
    }
    if (got != 0) {
      // An error after bytes is met again by the next read.
      more_ = got == buf.size();
      done({}, std::string_view(buf.data(), got));
      return;
    }
    if (ec) {
      done(ec, {});
      return;
    }
    wait_then_read(wait_for(w), std::move(done));
  }

  // Completion is posted, never run inside async_write, as asio's writes do.
  void write_now(const char* p, size_t len, size_t off, IoHandler done) {
    std::error_code ec;
    TlsEngine::Want w = TlsEngine::Want::Nothing;
    while (off < len && !ec) {
      size_t n = 0;
      w = engine_.write(p + off, len - off, n, ec);
      off += n;
      if (w != TlsEngine::Want::Nothing) break;
    }
    if (off == len || ec) {
      asio::post(socket_.get_executor(), [done = std::move(done), ec, off] { done(ec, off); });
      return;
    }
    socket_.async_wait(wait_for(w),
                       [this, p, len, off, done = std::move(done)](std::error_code e) mutable {
                         if (e) {
                           done(e, off);
                           return;
                         }
                         write_now(p, len, off, std::move(done));
                       });
  }

  Socket socket_;
  TlsEngine engine_;
  bool handshake_done_ = false;
  bool alpn_offered_ = false;  // offer_alpn() set the list: async_handshake keeps it
  bool more_ = false;  // the last read filled the buffer: more is probably waiting
};

using TcpTransport = SocketTransport<asio::ip::tcp::socket>;
using UnixTransport = SocketTransport<asio::local::stream_protocol::socket>;
using TcpTlsTransport = TlsTransport<asio::ip::tcp::socket>;
using UnixTlsTransport = TlsTransport<asio::local::stream_protocol::socket>;

}  // namespace konn::core::h2
