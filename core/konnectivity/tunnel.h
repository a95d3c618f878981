#pragma once

#include <memory>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/ssl/stream.hpp>

#include "core/konnectivity/grpc_tunnel.h"

namespace konn::core::konnectivity {

// One established tunnel to a destination, whatever carried the dial: an HTTP CONNECT over a unix
// socket (the socket itself is the tunnel, so a relay may splice(2) it), an HTTP CONNECT over
// TCP+mTLS, or a gRPC Proxy stream. To Asio it is a stream socket (async_read_some,
// async_write_some, shutdown, close), so core/relay and asio::async_write work on it. Like a
// socket, one read and one write may be in flight at the same time; everything runs on
// get_executor().
class Tunnel {
 public:
  using Unix = asio::local::stream_protocol::socket;
  using Tls = asio::ssl::stream<asio::ip::tcp::socket>;
  using executor_type = asio::any_io_executor;

 private:
  std::variant<Unix, std::unique_ptr<Tls>, std::unique_ptr<GrpcTunnel>> impl_;
  std::string early_;

  // Exception: a closed variant of transports instead of a virtual interface, since the Asio
  // operations are templates on the completion token.
  template <typename F>
  decltype(auto) visit(F&& f) {
    return std::visit(
        [&](auto& s) -> decltype(auto) {
          if constexpr (std::is_same_v<std::decay_t<decltype(s)>, Unix>) {
            return f(s);
          } else {
            return f(*s);
          }
        },
        impl_);
  }

 public:
  // `early`: destination bytes that arrived together with the proxy-server's 200.
  Tunnel(Unix s, std::string early) : impl_(std::move(s)), early_(std::move(early)) {}
  Tunnel(std::unique_ptr<Tls> s, std::string early)
      : impl_(std::move(s)), early_(std::move(early)) {}
  explicit Tunnel(std::unique_ptr<GrpcTunnel> t) : impl_(std::move(t)) {}

  executor_type get_executor() {
    return visit([](auto& s) { return executor_type(s.get_executor()); });
  }

  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& b, Token&& token) {
    return visit([&](auto& s) { return s.async_read_some(b, std::forward<Token>(token)); });
  }
  template <typename ConstBuffers, typename Token>
  auto async_write_some(const ConstBuffers& b, Token&& token) {
    return visit([&](auto& s) { return s.async_write_some(b, std::forward<Token>(token)); });
  }

  // Half-close towards the destination. TLS: the TCP send side is shut without close_notify
  // (Go peers read that as EOF). gRPC: see GrpcTunnel.
  void shutdown(asio::socket_base::shutdown_type what, std::error_code& ec) {
    if (auto* g = std::get_if<std::unique_ptr<GrpcTunnel>>(&impl_)) {
      (*g)->shutdown(what, ec);
    } else if (auto* t = std::get_if<std::unique_ptr<Tls>>(&impl_)) {
      (*t)->lowest_layer().shutdown(what, ec);
    } else {
      std::get<Unix>(impl_).shutdown(what, ec);
    }
  }
  // Idempotent; pending operations complete with operation_aborted.
  void close(std::error_code& ec) {
    if (auto* g = std::get_if<std::unique_ptr<GrpcTunnel>>(&impl_)) {
      (*g)->close(ec);
    } else if (auto* t = std::get_if<std::unique_ptr<Tls>>(&impl_)) {
      (*t)->lowest_layer().close(ec);
    } else {
      std::get<Unix>(impl_).close(ec);
    }
  }
  void close() {
    std::error_code ignored;
    close(ignored);
  }
  bool is_open() {
    if (auto* g = std::get_if<std::unique_ptr<GrpcTunnel>>(&impl_)) return (*g)->is_open();
    if (auto* t = std::get_if<std::unique_ptr<Tls>>(&impl_)) return (*t)->lowest_layer().is_open();
    return std::get<Unix>(impl_).is_open();
  }
  // For code written against sockets' lowest_layer().
  Tunnel& lowest_layer() { return *this; }

  // The plain socket when the tunnel is one (HTTP CONNECT over a unix socket), for splice(2).
  Unix* unix_socket() { return std::get_if<Unix>(&impl_); }
  GrpcTunnel* grpc() {
    auto* g = std::get_if<std::unique_ptr<GrpcTunnel>>(&impl_);
    return g != nullptr ? g->get() : nullptr;
  }
  // "unix", "tls" or "grpc".
  const char* kind() const {
    switch (impl_.index()) {
      case 0:
        return "unix";
      case 1:
        return "tls";
      default:
        return "grpc";
    }
  }
  // Destination bytes already read with the CONNECT answer: send them to the client before
  // relaying. Empty for gRPC tunnels.
  std::string& early_bytes() { return early_; }

 private:
};

}  // namespace konn::core::konnectivity
