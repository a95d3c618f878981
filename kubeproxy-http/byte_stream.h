#pragma once

#include <memory>
#include <tuple>
#include <type_traits>
#include <variant>

#include <asio/buffered_read_stream.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/ssl/stream.hpp>
#include <asio/write.hpp>

#include "core/io/asio_compat.h"
#include "core/konnectivity/tunnel.h"

namespace konn::kubeproxy {

// TCP with a large read buffer, for use under TLS: Asio's TLS engine asks its next layer for one
// record (about 16 KiB) at a time, so without this every record costs a recv() system call.
class BufferedTcp : public asio::buffered_read_stream<asio::ip::tcp::socket> {
 public:
  static constexpr size_t kReadBuffer = 256 * 1024;
  explicit BufferedTcp(asio::ip::tcp::socket&& s) : BufferedTcp(s.get_executor(), std::move(s)) {}

 private:
  // Asio 1.22's buffered_read_stream builds its stream from an lvalue argument, so build an empty
  // socket on the same executor and move the connected one in.
  BufferedTcp(asio::any_io_executor ex, asio::ip::tcp::socket&& s)
      : asio::buffered_read_stream<asio::ip::tcp::socket>(ex, kReadBuffer) {
    next_layer() = std::move(s);
  }
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
  };
  Lowest lowest() { return Lowest{*this}; }
};

}  // namespace konn::kubeproxy
