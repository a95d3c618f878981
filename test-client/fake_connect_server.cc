#include "test-client/fake_connect_server.h"

#include <charconv>

#include <asio/ssl.hpp>

#include "core/http/http1_parser.h"
#include "core/io/asio_compat.h"
#include "core/tls/tls_context.h"

namespace konn::testclient {
namespace {

using core::io::Awaitable;
using core::io::use_nothrow;
using unix_socket = asio::local::stream_protocol::socket;
using tls_stream = asio::ssl::stream<asio::ip::tcp::socket>;

constexpr char kEstablished[] = "HTTP/1.1 200 Connection Established\r\n\r\n";

// Ends our sending: a unix socket keeps its read side; TLS cannot, so it closes.
void shutdown_send(unix_socket& s) {
  std::error_code ignored;
  s.shutdown(asio::socket_base::shutdown_send, ignored);
}
void shutdown_send(tls_stream& s) {
  std::error_code ignored;
  s.lowest_layer().close(ignored);
}

template <typename Stream>
void close_stream(Stream& s) {
  std::error_code ignored;
  s.lowest_layer().shutdown(asio::socket_base::shutdown_both, ignored);
  s.lowest_layer().close(ignored);
}

template <typename Stream>
Awaitable<bool> send(Stream& s, std::string_view bytes) {
  asio::const_buffer b = asio::buffer(bytes);
  auto [ec, n] = co_await asio::async_write(s, b, use_nothrow);
  co_return !ec;
}

// Echoes until the client's EOF, then ends our sending.
template <typename Stream>
Awaitable<void> echo(Stream& s, FakeConnectServer* server) {
  std::string buf(64 * 1024, '\0');
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_nothrow);
    std::string_view got(buf.data(), n);
    if (n > 0 && !co_await send(s, got)) co_return;
    if (ec == asio::error::eof) {
      server->count_half_close();
      shutdown_send(s);
      // Wait for the client to close its side too.
      co_await s.async_read_some(asio::buffer(buf), use_nothrow);
      co_return;
    }
    if (ec) co_return;
  }
}

template <typename Stream>
Awaitable<void> serve(Stream& s, FakeConnectServer* server) {
  core::http::Http1Parser parser(core::http::Http1Parser::Kind::Request);
  std::string buf(16 * 1024, '\0');
  std::string leftover;
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_nothrow);
    if (ec) co_return;
    auto r = parser.feed(std::string_view(buf.data(), n));
    if (r.status == core::http::Http1Parser::Status::Invalid) co_return;
    if (r.status == core::http::Http1Parser::Status::MessageComplete) {
      leftover.assign(buf.data() + r.consumed, n - r.consumed);
      break;
    }
  }
  const auto& head = parser.head();
  const std::string* host = head.find("Host");
  server->record({head.method, head.target, host ? *host : std::string()});
  std::string mode = head.target.substr(0, head.target.rfind(':'));
  std::string arg = head.target.substr(head.target.rfind(':') + 1);
  uint64_t count = 0;
  std::from_chars(arg.data(), arg.data() + arg.size(), count);

  if (mode == "silent") {
    co_await s.async_read_some(asio::buffer(buf), use_nothrow);  // until the client gives up
    co_return;
  }
  if (mode == "garbage") {
    std::string_view junk = "SSH-2.0-OpenSSH_9.2\r\n\r\n";
    co_await send(s, junk);
    close_stream(s);
    co_return;
  }
  if (mode == "refuse") {
    std::string body = "dial tcp 127.0.0.1:" + arg + ": connect: connection refused";
    std::string rsp =
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\n"
        "Connection: close\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    co_await send(s, rsp);
    close_stream(s);
    co_return;
  }
  if (mode == "trickle") {
    std::string_view reply = kEstablished;
    for (size_t i = 0; i < reply.size(); ++i) {
      std::string_view one = reply.substr(i, 1);
      if (!co_await send(s, one)) co_return;
    }
    std::string_view after = "after";
    if (!co_await send(s, after)) co_return;
  } else if (mode == "early") {
    std::string both = std::string(kEstablished) + "early";
    if (!co_await send(s, both)) co_return;
  } else {
    std::string_view established = kEstablished;
    if (!co_await send(s, established)) co_return;
  }

  if (mode == "flood") {
    std::string chunk;
    for (uint64_t off = 0; off < count;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(256 * 1024, count - off));
      chunk.resize(n);
      for (size_t i = 0; i < n; ++i) chunk[i] = static_cast<char>((off + i) % 251);
      if (!co_await send(s, chunk)) co_return;
      off += n;
    }
    shutdown_send(s);
    co_await s.async_read_some(asio::buffer(buf), use_nothrow);
    co_return;
  }
  if (mode == "sink") {
    uint64_t got = leftover.size();
    for (;;) {
      auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_nothrow);
      got += n;
      if (ec == asio::error::eof) {
        server->count_half_close();
        std::string text = std::to_string(got);
        co_await send(s, text);
        close_stream(s);
        co_return;
      }
      if (ec) co_return;
    }
  }
  if (mode == "http") {
    core::http::Http1Parser get(core::http::Http1Parser::Kind::Request);
    std::string_view data = leftover;
    for (;;) {
      auto r = get.feed(data);
      if (r.status == core::http::Http1Parser::Status::Invalid) co_return;
      if (r.status == core::http::Http1Parser::Status::MessageComplete) break;
      auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_nothrow);
      if (ec) co_return;
      data = std::string_view(buf.data(), n);
    }
    std::string_view page = "HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\nhello via connect";
    co_await send(s, page);
    close_stream(s);
    co_return;
  }
  // echo, early, trickle
  if (!leftover.empty() && !co_await send(s, leftover)) co_return;
  co_await echo(s, server);
}

}  // namespace

FakeConnectServer::FakeConnectServer(const std::string& socket_path, const Tls* tls)
    : unix_acceptor_(ctx_, asio::local::stream_protocol::endpoint(socket_path)) {
  asio::co_spawn(
      ctx_,
      [this]() -> Awaitable<void> {
        for (;;) {
          auto [ec, s] = co_await unix_acceptor_.async_accept(use_nothrow);
          if (ec) co_return;
          asio::co_spawn(
              ctx_,
              [](unix_socket sock, FakeConnectServer* server) -> Awaitable<void> {
                co_await serve(sock, server);
              }(std::move(s), this),
              asio::detached);
        }
      },
      asio::detached);
  if (tls != nullptr) {
    core::tls::ServerTlsConfig cfg;
    cfg.cert_file = tls->cert_file;
    cfg.key_file = tls->key_file;
    cfg.client_ca_file = tls->client_ca_file;
    ssl_ctx_ = core::tls::make_server_context(cfg);
    tcp_acceptor_ = std::make_unique<asio::ip::tcp::acceptor>(
        ctx_, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    tls_port_ = tcp_acceptor_->local_endpoint().port();
    asio::co_spawn(
        ctx_,
        [this]() -> Awaitable<void> {
          for (;;) {
            auto [ec, s] = co_await tcp_acceptor_->async_accept(use_nothrow);
            if (ec) co_return;
            asio::co_spawn(
                ctx_,
                [](asio::ip::tcp::socket sock, std::shared_ptr<asio::ssl::context> ssl,
                   FakeConnectServer* server) -> Awaitable<void> {
                  tls_stream ts(std::move(sock), *ssl);
                  auto [hec] =
                      co_await ts.async_handshake(asio::ssl::stream_base::server, use_nothrow);
                  if (hec) co_return;
                  co_await serve(ts, server);
                }(std::move(s), ssl_ctx_, this),
                asio::detached);
          }
        },
        asio::detached);
  }
  thread_ = std::thread([this] { ctx_.run(); });
}

FakeConnectServer::~FakeConnectServer() {
  ctx_.stop();
  thread_.join();
}

std::vector<FakeConnectServer::Request> FakeConnectServer::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

void FakeConnectServer::record(Request r) {
  std::lock_guard lock(mu_);
  requests_.push_back(std::move(r));
}

}  // namespace konn::testclient
