#include "core/konnectivity/dialer.h"

#include <array>

#include <asio/ssl.hpp>

#include "core/konnectivity/connect_reply.h"
#include "core/log/log_macros.h"
#include "core/net/dialer.h"
#include "core/net/endpoint.h"
#include "core/tls/pem.h"
#include "core/tls/tls_context.h"

namespace konn::core::konnectivity {
namespace {

using namespace asio::experimental::awaitable_operators;
using asio::ip::tcp;
using Unix = asio::local::stream_protocol;

const std::shared_ptr<spdlog::logger>& logger() {
  static auto log = core::log::get("konnectivity");
  return log;
}

DialError proxy_error(std::string text) {
  return DialError{DialFailure::ProxyUnavailable, std::move(text), 0};
}

// CONNECT on an open connection to the proxy-server; reads the answer with core/http.
template <typename Stream>
io::Awaitable<DialError> connect_exchange(Stream& s, const std::string& address,
                                          std::string& leftover) {
  std::string request = connect_request(address);
  auto [wec, wn] = co_await asio::async_write(s, asio::buffer(request), io::use_nothrow);
  if (wec) co_return proxy_error("sending CONNECT to the proxy-server: " + wec.message());
  ConnectReply reply;
  std::array<char, 4096> buf{};
  ConnectReply::Status st = ConnectReply::Status::NeedMore;
  while (st == ConnectReply::Status::NeedMore) {
    auto [rec, n] = co_await s.async_read_some(asio::buffer(buf), io::use_nothrow);
    if (n > 0) st = reply.feed(std::string_view(buf.data(), n));
    if (st != ConnectReply::Status::NeedMore) break;
    if (rec == asio::error::eof || rec == asio::ssl::error::stream_truncated) {
      st = reply.finish();
    } else if (rec) {
      co_return proxy_error("reading the proxy-server's answer to CONNECT: " + rec.message());
    }
  }
  switch (st) {
    case ConnectReply::Status::Established:
      leftover = reply.leftover();
      co_return DialError{};
    case ConnectReply::Status::Failed: {
      DialFailure f = classify(reply.body());
      if (f == DialFailure::Other && reply.status() == 504) f = DialFailure::Timeout;
      co_return DialError{f, "proxy-server answered " + reply.describe(), reply.status()};
    }
    default:
      co_return proxy_error(reply.error());
  }
}

}  // namespace

Dialer::Dialer(const UpstreamOptions& options) : options_(options) {
  if (!options_.is_unix(&unix_path_)) {
    auto hp = net::parse_host_port(options_.address);
    if (!hp) throw std::runtime_error("--konnectivity-address: not host:port: " + options_.address);
    host_ = hp->host;
    port_ = hp->port;
    server_name_ = options_.server_name.empty() ? host_ : options_.server_name;
  }
  if (unix_path_.empty()) {
    tls::ClientTlsConfig c;
    c.ca_pem = tls::read_pem(options_.ca_cert);
    c.cert_pem = tls::read_pem(options_.client_cert);
    c.key_pem = tls::read_pem(options_.client_key);
    // gRPC mode: each connection offers ALPN h2 itself (core/h2's TLS transport).
    if (!options_.grpc()) c.alpn = {"http/1.1"};
    tls_ = tls::make_client_context(c);
  }
  if (options_.grpc()) {
    FrontendAddress a;
    a.unix_path = unix_path_;
    a.host = host_;
    a.port = port_;
    a.server_name = server_name_;
    a.tls = tls_;
    a.connect_timeout =
        std::chrono::duration_cast<std::chrono::milliseconds>(options_.dial_timeout);
    connections_ = std::make_unique<ProxyConnections>(std::move(a));
  }
}

Dialer::~Dialer() = default;

size_t Dialer::open_streams() const { return connections_ ? connections_->open_calls() : 0; }

size_t Dialer::connections_made() const {
  return connections_ ? connections_->connections_made() : 0;
}

io::Awaitable<DialResult> Dialer::dial(std::string address, std::chrono::milliseconds timeout) {
  timeout = std::min(timeout,
                     std::chrono::duration_cast<std::chrono::milliseconds>(options_.dial_timeout));
  DialResult out;
  if (options_.grpc()) {
    auto r = co_await GrpcTunnel::dial(*connections_, address, timeout);
    if (r.tunnel) {
      out.tunnel = std::make_unique<Tunnel>(std::move(r.tunnel));
    } else {
      out.error = std::move(r.error);
      KONN_LOG(logger(), debug, "dial {} via {}: {}", address, options_.address, out.error.text);
    }
    co_return out;
  }
  out = co_await dial_http_connect(address, timeout);
  if (out.error)
    KONN_LOG(logger(), debug, "dial {} via {}: {}", address, options_.address, out.error.text);
  co_return out;
}

io::Awaitable<DialResult> Dialer::dial_http_connect(std::string address,
                                                    std::chrono::milliseconds timeout) {
  auto ex = co_await asio::this_coro::executor;
  DialResult out;
  asio::steady_timer deadline(ex, timeout);
  std::string leftover;
  if (!unix_path_.empty()) {
    Unix::socket s(ex);
    auto attempt = [&]() -> io::Awaitable<DialError> {
      auto [ec] = co_await s.async_connect(Unix::endpoint(unix_path_), io::use_nothrow);
      if (ec) {
        co_return proxy_error("connect to proxy-server unix:" + unix_path_ + ": " + ec.message());
      }
      co_return co_await connect_exchange(s, address, leftover);
    };
    auto r = co_await (attempt() || deadline.async_wait(io::use_nothrow));
    if (r.index() == 1) {
      out.error = DialError{
          DialFailure::Timeout,
          "dial timeout: no answer to CONNECT within " + std::to_string(timeout.count()) + "ms", 0};
      co_return out;
    }
    out.error = std::get<0>(std::move(r));
    if (!out.error) out.tunnel = std::make_unique<Tunnel>(std::move(s), std::move(leftover));
    co_return out;
  }

  std::unique_ptr<Tunnel::Tls> tls;
  auto attempt = [&]() -> io::Awaitable<DialError> {
    std::string target = net::HostPort{host_, port_}.to_string();
    auto d = co_await net::dial_tcp(ex, target, timeout);
    if (d.ec) co_return proxy_error("proxy-server: " + d.error_text);
    tls = std::make_unique<Tunnel::Tls>(std::move(d.socket), *tls_);
    if (!tls::prepare_client(tls->native_handle(), server_name_, true)) {
      co_return proxy_error("proxy-server: cannot verify name " + server_name_);
    }
    auto [hec] = co_await tls->async_handshake(asio::ssl::stream_base::client, io::use_nothrow);
    if (hec) {
      co_return proxy_error("TLS handshake with proxy-server " + target + ": " + hec.message());
    }
    co_return co_await connect_exchange(*tls, address, leftover);
  };
  auto r = co_await (attempt() || deadline.async_wait(io::use_nothrow));
  if (r.index() == 1) {
    out.error = DialError{
        DialFailure::Timeout,
        "dial timeout: no answer to CONNECT within " + std::to_string(timeout.count()) + "ms", 0};
    co_return out;
  }
  out.error = std::get<0>(std::move(r));
  if (!out.error) out.tunnel = std::make_unique<Tunnel>(std::move(tls), std::move(leftover));
  co_return out;
}

std::optional<std::string> Dialer::probe(std::chrono::milliseconds timeout) const {
  asio::io_context ctx;
  std::error_code result = asio::error::timed_out;
  std::string where;
  if (!unix_path_.empty()) {
    where = "unix:" + unix_path_;
    Unix::socket s(ctx);
    s.async_connect(Unix::endpoint(unix_path_), [&](std::error_code ec) { result = ec; });
    ctx.run_for(timeout);
  } else {
    where = net::HostPort{host_, port_}.to_string();
    std::string text;
    asio::co_spawn(
        ctx,
        [&]() -> io::Awaitable<void> {
          auto r = co_await net::dial_tcp(ctx.get_executor(), where, timeout);
          result = r.ec;
          text = r.error_text;
        },
        asio::detached);
    ctx.run_for(timeout + std::chrono::milliseconds(100));
    if (result && !text.empty()) where += " (" + text + ")";
  }
  if (!result) return std::nullopt;
  return "proxy-server " + where + " unreachable: " + result.message();
}

}  // namespace konn::core::konnectivity
