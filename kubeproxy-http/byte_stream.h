#pragma once

#include <algorithm>
#include <memory>
#include <tuple>
#include <type_traits>
#include <variant>

#include <asio/compose.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/ssl/stream.hpp>
#include <asio/write.hpp>

#include "core/io/asio_compat.h"
#include "core/konnectivity/tunnel.h"

namespace konn::kubeproxy {

// TCP under TLS, reading in large gulps: Asio's TLS engine asks its next layer for one record
// (about 16 KiB) at a time, so read straight from the socket every record would cost a recv()
// system call. Once the socket is readable, a read that asks for less than the socket holds
// takes everything into a buffer of the size waiting (at most kReadBuffer), and the following
// reads are served from it. The buffer exists only while it holds bytes: an idle connection (a
// keep-alive client between requests, an upstream connection in the pool) holds none, where a
// fixed 256 KiB buffer per connection used to stay resident for the connection's whole life.
//
// Satisfies what asio::ssl::stream needs of its next layer. One read and one write may be in
// flight at once, as on the socket.
class BufferedTcp {
 public:
  static constexpr size_t kReadBuffer = 256 * 1024;
  using next_layer_type = asio::ip::tcp::socket;
  using lowest_layer_type = next_layer_type::lowest_layer_type;
  using executor_type = next_layer_type::executor_type;

  explicit BufferedTcp(asio::ip::tcp::socket&& s) : socket_(std::move(s)) {
    std::error_code ignored;
    // A readiness report can be stale: the read after it must fail with would_block, not wait.
    socket_.non_blocking(true, ignored);
  }

  executor_type get_executor() { return socket_.get_executor(); }
  next_layer_type& next_layer() { return socket_; }
  lowest_layer_type& lowest_layer() { return socket_.lowest_layer(); }

  // Bytes read from the socket and not yet handed out.
  size_t in_avail() const { return end_ - begin_; }
  // Whether a buffer is held now (for tests).
  bool holds_buffer() const { return storage_ != nullptr; }

  template <typename ConstBufferSequence, typename Token>
  auto async_write_some(const ConstBufferSequence& buffers, Token&& token) {
    return socket_.async_write_some(buffers, std::forward<Token>(token));
  }

  template <typename MutableBufferSequence, typename Token>
  auto async_read_some(const MutableBufferSequence& buffers, Token&& token) {
    return asio::async_compose<Token, void(std::error_code, size_t)>(
        ReadSome<MutableBufferSequence>{*this, buffers}, token, socket_);
  }

 private:
  template <typename MutableBufferSequence>
  struct ReadSome {
    BufferedTcp& s;
    MutableBufferSequence buffers;
    enum class Step { Start, Buffered, Readable } step = Step::Start;

    template <typename Self>
    void operator()(Self& self, std::error_code ec = {}) {
      if (step == Step::Start) {
        if (s.in_avail() > 0 || asio::buffer_size(buffers) == 0) {
          // Completes through the executor, never inside the initiating call.
          step = Step::Buffered;
          auto ex = s.socket_.get_executor();
          asio::post(ex, [self = std::move(self)]() mutable { self(std::error_code()); });
          return;
        }
        step = Step::Readable;
        s.socket_.async_wait(asio::socket_base::wait_read, std::move(self));
        return;
      }
      if (step == Step::Buffered) {
        self.complete(std::error_code(), s.take(buffers));
        return;
      }
      if (ec) {
        self.complete(ec, 0);
        return;
      }
      size_t n = 0;
      ec = s.fill(buffers, n);
      if (ec == asio::error::would_block) {
        s.socket_.async_wait(asio::socket_base::wait_read, std::move(self));
        return;
      }
      self.complete(ec, n);
    }
  };

  // The socket is readable: reads what it holds, straight into `buffers` when they can take all
  // of it, else into a buffer of that size; `n` is what went into `buffers`.
  template <typename MutableBufferSequence>
  std::error_code fill(const MutableBufferSequence& buffers, size_t& n) {
    std::error_code ec;
    size_t waiting = socket_.available(ec);
    if (ec || waiting <= asio::buffer_size(buffers)) {
      n = socket_.read_some(buffers, ec);
      return ec;
    }
    size_t size = std::min(waiting, kReadBuffer);
    storage_ = std::make_unique_for_overwrite<char[]>(size);
    begin_ = 0;
    end_ = socket_.read_some(asio::buffer(storage_.get(), size), ec);
    if (ec) {
      storage_.reset();
      end_ = 0;
      return ec;
    }
    n = take(buffers);
    return ec;
  }

  // Hands buffered bytes out; the buffer goes once it is empty.
  template <typename MutableBufferSequence>
  size_t take(const MutableBufferSequence& buffers) {
    size_t n = asio::buffer_copy(buffers, asio::buffer(storage_.get() + begin_, end_ - begin_));
    begin_ += n;
    if (begin_ == end_) {
      storage_.reset();
      begin_ = end_ = 0;
    }
    return n;
  }

  asio::ip::tcp::socket socket_;
  std::unique_ptr<char[]> storage_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

// TLS inside TLS: the apiserver's session carried in the CONNECT tunnel of an https proxy-url.
// The inner engine reads and writes the outer stream's plaintext, so each byte is decrypted twice
// and copied only by the two TLS engines; the outer stream lives on the heap (unique_ptr) so the
// inner one can keep a reference to it. Members are destroyed inner first.
struct TlsInTls {
  using Outer = asio::ssl::stream<BufferedTcp>;
  using Inner = asio::ssl::stream<Outer&>;
  std::unique_ptr<Outer> outer;
  Inner inner;
  TlsInTls(std::unique_ptr<Outer> o, asio::ssl::context& ctx)
      : outer(std::move(o)), inner(*outer, ctx) {}
};

// One connected byte stream of any of the kinds the proxy handles: TCP, a unix socket, TLS over
// TCP (handshake already done), TLS inside TLS (through an https proxy), or a tunnel through a
// Konnectivity proxy-server. Lets the HTTP code
// be written once. Like the sockets it wraps, it allows one read and one write in flight at the
// same time.
class ByteStream {
 public:
  using Tcp = asio::ip::tcp::socket;
  using Unix = asio::local::stream_protocol::socket;
  using Tls = asio::ssl::stream<BufferedTcp>;
  using Konnectivity = core::konnectivity::Tunnel;
  using IoResult = std::tuple<std::error_code, size_t>;

 private:
  std::variant<Tcp, Unix, std::unique_ptr<Tls>, std::unique_ptr<Konnectivity>,
               std::unique_ptr<TlsInTls>>
      impl_;

  template <typename F>
  decltype(auto) visit(F&& f) {
    return std::visit(
        [&](auto& s) -> decltype(auto) {
          using T = std::decay_t<decltype(s)>;
          if constexpr (std::is_same_v<T, std::unique_ptr<TlsInTls>>) {
            return f(s->inner);
          } else if constexpr (std::is_same_v<T, std::unique_ptr<Tls>> ||
                               std::is_same_v<T, std::unique_ptr<Konnectivity>>) {
            return f(*s);
          } else {
            return f(s);
          }
        },
        impl_);
  }

 public:
  explicit ByteStream(Tcp s) : impl_(std::move(s)) {}
  explicit ByteStream(Unix s) : impl_(std::move(s)) {}
  explicit ByteStream(std::unique_ptr<Tls> s) : impl_(std::move(s)) {}
  explicit ByteStream(std::unique_ptr<Konnectivity> s) : impl_(std::move(s)) {}
  explicit ByteStream(std::unique_ptr<TlsInTls> s) : impl_(std::move(s)) {}

  asio::any_io_executor get_executor() {
    return visit([](auto& s) { return asio::any_io_executor(s.get_executor()); });
  }

  // Reads what is available (at least one byte), or an error/EOF.
  core::io::Awaitable<IoResult> read_some(asio::mutable_buffer buf) {
    return visit([&](auto& s) { return s.async_read_some(buf, core::io::use_nothrow); });
  }

  // Writes every byte of `bufs` (a buffer sequence that must stay alive until completion).
  template <typename Buffers>
  core::io::Awaitable<IoResult> write(const Buffers& bufs) {
    return visit([&](auto& s) { return asio::async_write(s, bufs, core::io::use_nothrow); });
  }

  // Half-close: the peer reads EOF; our reads continue. For TLS this closes the TCP send side
  // without close_notify, which Go peers accept as EOF at a record boundary.
  void shutdown_send() {
    std::error_code ignored;
    lowest().shutdown(asio::socket_base::shutdown_send, ignored);
  }

  // Closes the connection; pending operations complete with operation_aborted. Idempotent.
  void close() {
    std::error_code ignored;
    lowest().close(ignored);
  }

  bool is_open() { return lowest().is_open(); }

  // Ends the pending operations with operation_aborted and leaves the stream open (a reply can
  // still be written). A gRPC tunnel cannot end one operation alone, so it is closed instead.
  void cancel() { lowest().cancel(); }

  // Waits until a read would not block, so a caller can take its buffer only then. Plain sockets
  // only (a Konnectivity tunnel that is a unix socket included): a TLS stream may hold decrypted
  // bytes its socket no longer shows, and a gRPC tunnel has no socket, so for them it returns at
  // once (can_wait_readable() is false).
  core::io::Awaitable<std::error_code> wait_readable() {
    if (auto* t = std::get_if<Tcp>(&impl_)) {
      auto [ec] = co_await t->async_wait(asio::socket_base::wait_read, core::io::use_nothrow);
      co_return ec;
    }
    if (auto* u = plain_unix()) {
      auto [ec] = co_await u->async_wait(asio::socket_base::wait_read, core::io::use_nothrow);
      co_return ec;
    }
    co_return std::error_code();
  }
  bool can_wait_readable() { return std::holds_alternative<Tcp>(impl_) || plain_unix() != nullptr; }

  // The underlying socket, for options (keepalive, nodelay).
  // Bytes that a read would return without waiting for the network: TLS plaintext already
  // decrypted plus ciphertext already received. Always 0 for plain sockets (the kernel buffer is
  // not looked at; one read takes what is there anyway).
  size_t buffered() {
    if (auto* s = std::get_if<std::unique_ptr<Tls>>(&impl_)) {
      return static_cast<size_t>(SSL_pending((*s)->native_handle())) +
             (*s)->next_layer().in_avail();
    }
    if (auto* s = std::get_if<std::unique_ptr<TlsInTls>>(&impl_)) {
      return static_cast<size_t>(SSL_pending((*s)->inner.native_handle())) +
             static_cast<size_t>(SSL_pending((*s)->outer->native_handle())) +
             (*s)->outer->next_layer().in_avail();
    }
    return 0;
  }

  bool is_tls() const {
    return std::holds_alternative<std::unique_ptr<Tls>>(impl_) ||
           std::holds_alternative<std::unique_ptr<TlsInTls>>(impl_);
  }

  // Takes the TLS stream out (to layer another TLS session over it); null when this is not
  // single TLS. The ByteStream is left unusable.
  std::unique_ptr<Tls> release_tls() {
    auto* s = std::get_if<std::unique_ptr<Tls>>(&impl_);
    return s != nullptr ? std::move(*s) : nullptr;
  }

  // The unix socket, when this is one or a Konnectivity tunnel that is one.
  Unix* plain_unix() {
    if (auto* u = std::get_if<Unix>(&impl_)) return u;
    if (auto* k = std::get_if<std::unique_ptr<Konnectivity>>(&impl_)) return (*k)->unix_socket();
    return nullptr;
  }

  Tcp* tcp() {
    if (auto* t = std::get_if<Tcp>(&impl_)) return t;
    if (auto* s = std::get_if<std::unique_ptr<Tls>>(&impl_))
      return &(*s)->next_layer().next_layer();
    if (auto* s = std::get_if<std::unique_ptr<TlsInTls>>(&impl_))
      return &(*s)->outer->next_layer().next_layer();
    return nullptr;
  }

 private:
  // Exception: a small variant of socket kinds instead of a virtual interface: every operation is
  // a coroutine already and the set of kinds is closed.
  struct Lowest {
    ByteStream& self;
    template <typename... A>
    void shutdown(A&&... a) {
      self.visit([&](auto& s) { s.lowest_layer().shutdown(a...); });
    }
    void close(std::error_code& ec) {
      self.visit([&](auto& s) { s.lowest_layer().close(ec); });
    }
    bool is_open() {
      return self.visit([](auto& s) { return s.lowest_layer().is_open(); });
    }
    void cancel() {
      std::error_code ignored;
      self.visit([&](auto& s) {
        auto& low = s.lowest_layer();
        if constexpr (requires { low.cancel(ignored); }) {
          low.cancel(ignored);
        } else {
          low.close(ignored);
        }
      });
    }
  };
  Lowest lowest() { return Lowest{*this}; }
};

}  // namespace konn::kubeproxy
