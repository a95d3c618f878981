#include "proxy-agent/server_connector.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <asio/ssl.hpp>
#include <catch2/catch.hpp>

#include "core/h2/transport.h"
#include "core/io/asio_compat.h"
#include "core/net/endpoint.h"
#include "core/tls/tls_context.h"
#include "tests/support/loopback.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace {

using namespace std::chrono_literals;
using konn::agent::connect_server;
using konn::agent::EgressProxy;
using konn::agent::ProxyFailure;
using konn::agent::ServerConnectResult;
using konn::agent::ServerConnectTarget;
using konn::core::io::use_nothrow;
using tcp = asio::ip::tcp;

constexpr auto npos = std::string::npos;

// A TLS server on loopback: accepts, handshakes as a server and keeps the connection open. With
// `h2`, it answers ALPN with "h2"; it requires the agent's client certificate (as a
// proxy-server does).
class TlsServer {
 public:
  TlsServer(asio::io_context& io, bool h2, const std::string& bind = "127.0.0.1")
      : acceptor_(io, tcp::endpoint(asio::ip::make_address(bind), 0)) {
    const auto& certs = konn::testsupport::test_certs();
    ctx_ = konn::core::tls::make_server_context(
        {certs.server_crt, certs.server_key, certs.ca_crt, {}});
    if (h2) konn::core::h2::enable_h2_alpn(*ctx_);
    asio::co_spawn(io, serve(), asio::detached);
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  int handshakes = 0;   // completed server handshakes
  std::string peer_cn;  // the client certificate's common name, when one came
  std::string sni;      // the server name the last client sent ("" for none)

 private:
  asio::awaitable<void> serve() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(use_nothrow);
      if (ec) co_return;
      auto stream = std::make_shared<asio::ssl::stream<tcp::socket>>(std::move(socket), *ctx_);
      streams_.push_back(stream);
      auto [hec] = co_await stream->async_handshake(asio::ssl::stream_base::server, use_nothrow);
      if (hec) continue;
      ++handshakes;
      const char* name = SSL_get_servername(stream->native_handle(), TLSEXT_NAMETYPE_host_name);
      sni = name == nullptr ? "" : name;
      if (X509* cert = SSL_get_peer_certificate(stream->native_handle())) {
        char cn[256] = {};
        X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
        peer_cn = cn;
        X509_free(cert);
      }
    }
  }
  tcp::acceptor acceptor_;
  std::shared_ptr<asio::ssl::context> ctx_;
  std::vector<std::shared_ptr<asio::ssl::stream<tcp::socket>>> streams_;
};

// Accepts connections and never says a word.
class SilentServer {
 public:
  explicit SilentServer(asio::io_context& io)
      : acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    asio::co_spawn(io, serve(), asio::detached);
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }

 private:
  asio::awaitable<void> serve() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(use_nothrow);
      if (ec) co_return;
      held_.push_back(std::make_shared<tcp::socket>(std::move(socket)));
    }
  }
  tcp::acceptor acceptor_;
  std::vector<std::shared_ptr<tcp::socket>> held_;
};

// A tiny HTTP CONNECT proxy: reads the request head, records it, and answers `answer` (a whole
// response head). A 2xx answer is followed by a tunnel to 127.0.0.1 at the CONNECT's port.
class ConnectProxy {
 public:
  ConnectProxy(asio::io_context& io, std::string answer)
      : acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        answer_(std::move(answer)) {
    asio::co_spawn(io, serve(), asio::detached);
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  std::string request;  // the request head received

 private:
  asio::awaitable<void> serve() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(use_nothrow);
      if (ec) co_return;
      asio::co_spawn(acceptor_.get_executor(),
                     session(std::make_shared<tcp::socket>(std::move(socket))), asio::detached);
    }
  }
  asio::awaitable<void> session(std::shared_ptr<tcp::socket> client) {
    std::string head;
    auto [ec, n] = co_await asio::async_read_until(*client, asio::dynamic_buffer(head), "\r\n\r\n",
                                                   use_nothrow);
    if (ec) co_return;
    request = head.substr(0, n);
    co_await asio::async_write(*client, asio::buffer(answer_), use_nothrow);
    if (answer_.rfind("HTTP/1.1 2", 0) != 0) {
      // Kept open, as a proxy may: the client ends it.
      co_await client->async_wait(tcp::socket::wait_read, use_nothrow);
      co_return;
    }
    // "CONNECT host:port HTTP/1.1": the tunnel goes to that address (a loopback IP here).
    const auto target =
        konn::core::net::parse_host_port(request.substr(8, request.find(' ', 8) - 8));
    if (!target) co_return;
    auto upstream = std::make_shared<tcp::socket>(acceptor_.get_executor());
    auto [cec] = co_await upstream->async_connect(
        tcp::endpoint(asio::ip::make_address(target->host), target->port), use_nothrow);
    if (cec) co_return;
    auto ex = acceptor_.get_executor();
    asio::co_spawn(ex, pump(client, upstream), asio::detached);
    asio::co_spawn(ex, pump(upstream, client), asio::detached);
  }
  static asio::awaitable<void> pump(std::shared_ptr<tcp::socket> from,
                                    std::shared_ptr<tcp::socket> to) {
    std::array<char, 16384> buf{};
    for (;;) {
      auto [rec, n] = co_await from->async_read_some(asio::buffer(buf), use_nothrow);
      if (rec) break;
      auto [wec, m] = co_await asio::async_write(*to, asio::buffer(buf.data(), n), use_nothrow);
      if (wec) break;
    }
    std::error_code ignored;
    to->shutdown(tcp::socket::shutdown_send, ignored);
  }
  tcp::acceptor acceptor_;
  std::string answer_;
};

std::shared_ptr<asio::ssl::context> agent_context() {
  const auto& certs = konn::testsupport::test_certs();
  return konn::agent::make_server_client_context(certs.ca_crt, certs.agent_crt, certs.agent_key);
}

EgressProxy proxy_at(uint16_t port, const std::string& userinfo = "") {
  std::string error;
  auto p = konn::agent::parse_proxy_url(
      "http://" + (userinfo.empty() ? "" : userinfo + "@") + "127.0.0.1:" + std::to_string(port),
      &error);
  REQUIRE(p);
  p->source = "--proxy-url";
  return *p;
}

ServerConnectTarget target(const std::string& host, uint16_t port,
                           std::chrono::milliseconds timeout = 2s) {
  ServerConnectTarget t;
  t.host = host;
  t.port = port;
  t.tls = agent_context();
  t.timeout = timeout;
  return t;
}

// Runs connect_server on `io` (with the test's servers) until it completes; `elapsed` is how long
// it took.
ServerConnectResult connect(asio::io_context& io, ServerConnectTarget t,
                            std::chrono::milliseconds* elapsed = nullptr) {
  std::optional<ServerConnectResult> result;
  auto start = std::chrono::steady_clock::now();
  asio::co_spawn(io, connect_server(io.get_executor(), std::move(t)),
                 [&](std::exception_ptr e, ServerConnectResult r) {
                   REQUIRE_FALSE(e);
                   result = std::move(r);
                 });
  while (!result && std::chrono::steady_clock::now() - start < 10s) io.run_one_for(100ms);
  if (elapsed) {
    *elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
  }
  REQUIRE(result);
  // Let the servers see what the client did last (the end of its handshake).
  io.run_for(20ms);
  return std::move(*result);
}

// Runs `io` until `server` completed `n` handshakes, for at most 5 s: the client's side of a
// handshake ends before the server's, which a loaded machine can delay by more than a few ms.
bool await_handshakes(asio::io_context& io, const TlsServer& server, int n) {
  auto until = std::chrono::steady_clock::now() + 5s;
  while (server.handshakes < n && std::chrono::steady_clock::now() < until) {
    io.run_one_for(10ms);
  }
  return server.handshakes >= n;
}

}  // namespace

TEST_CASE("connect_server: TLS with ALPN h2 and the agent's certificate, handshake verified",
          "[agent][server-connector]") {
  asio::io_context io;
  TlsServer server(io, true);
  auto r = connect(io, target("127.0.0.1", server.port()));
  INFO(r.error);
  REQUIRE(r.transport);
  CHECK(r.error.empty());
  CHECK_FALSE(r.proxy_failure);
  CHECK(r.transport->is_tls());
  REQUIRE(await_handshakes(io, server, 1));
  CHECK(server.handshakes == 1);
  CHECK(server.peer_cn == "proxy-agent");
  CHECK(server.sni.empty());  // SNI carries no IP address
  // A Connection's start() must not handshake again: the transport completes at once.
  bool done = false;
  r.transport->async_handshake(false, [&](std::error_code ec) { done = !ec; });
  CHECK(done);

  SECTION("IPv6, the certificate's ::1") {
    TlsServer v6(io, true, "::1");
    auto r6 = connect(io, target("::1", v6.port()));
    INFO(r6.error);
    CHECK(r6.transport);
  }
  SECTION("by name, with SNI") {
    auto named = connect(io, target("localhost", server.port()));
    INFO(named.error);
    CHECK(named.transport);
    REQUIRE(await_handshakes(io, server, 2));
    CHECK(server.sni == "localhost");
  }
}

TEST_CASE("connect_server: a server the CA does not vouch for, or under another name, is refused",
          "[agent][server-connector]") {
  asio::io_context io;
  SECTION("another CA") {
    TlsServer server(io, true);
    konn::testsupport::TempDir dir{"konn-connector"};
    auto other = konn::testsupport::generate_certs(dir.path());
    auto t = target("127.0.0.1", server.port());
    t.tls = konn::agent::make_server_client_context(other.ca_crt, other.agent_crt, other.agent_key);
    auto r = connect(io, t);
    CHECK_FALSE(r.transport);
    CHECK(r.error.find("TLS handshake with 127.0.0.1:" + std::to_string(server.port()) +
                       ": certificate verify failed (") != npos);
    CHECK(server.handshakes == 0);
  }
  SECTION("another name: the certificate has no 127.0.0.2") {
    TlsServer server(io, true, "127.0.0.2");
    auto r = connect(io, target("127.0.0.2", server.port()));
    CHECK_FALSE(r.transport);
    CHECK(r.error == "TLS handshake with 127.0.0.2:" + std::to_string(server.port()) +
                         ": certificate verify failed (IP address mismatch)");
  }
}

TEST_CASE("connect_server: a server without ALPN h2 is refused", "[agent][server-connector]") {
  asio::io_context io;
  TlsServer server(io, false);
  auto r = connect(io, target("127.0.0.1", server.port()));
  CHECK_FALSE(r.transport);
  CHECK(r.error == "no HTTP/2 (ALPN h2) from 127.0.0.1:" + std::to_string(server.port()));
}

TEST_CASE("connect_server: a refused port and a silent server end in plain words",
          "[agent][server-connector]") {
  asio::io_context io;
  SECTION("refused") {
    const auto port = konn::testsupport::free_tcp_port();
    auto r = connect(io, target("127.0.0.1", port));
    CHECK_FALSE(r.transport);
    CHECK(r.error ==
          "dial tcp 127.0.0.1:" + std::to_string(port) + ": connect: connection refused");
    CHECK_FALSE(r.proxy_failure);
  }
  SECTION("accepts and never answers the TLS hello") {
    SilentServer silent(io);
    std::chrono::milliseconds elapsed{};
    auto r = connect(io, target("127.0.0.1", silent.port(), 200ms), &elapsed);
    CHECK_FALSE(r.transport);
    CHECK(r.error == "timed out after 200ms (TLS handshake with 127.0.0.1:" +
                         std::to_string(silent.port()) + ")");
    CHECK(elapsed >= 190ms);
    CHECK(elapsed < 1s);
  }
}

TEST_CASE("connect_server: through an HTTP proxy, CONNECT with Proxy-Authorization, then TLS",
          "[agent][server-connector][egress-proxy]") {
  asio::io_context io;
  TlsServer server(io, true);
  ConnectProxy proxy(io, "HTTP/1.1 200 Connection established\r\n\r\n");
  auto t = target("127.0.0.1", server.port());
  t.proxy = proxy_at(proxy.port(), "alice:secret");
  auto r = connect(io, t);
  INFO(r.error);
  REQUIRE(r.transport);
  CHECK_FALSE(r.proxy_failure);
  REQUIRE(await_handshakes(io, server, 1));
  CHECK(server.handshakes == 1);
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  CHECK(proxy.request.rfind("CONNECT " + address + " HTTP/1.1\r\n", 0) == 0);
  CHECK(proxy.request.find("\r\nHost: " + address + "\r\n") != npos);
  // base64("alice:secret")
  CHECK(proxy.request.find("\r\nProxy-Authorization: Basic YWxpY2U6c2VjcmV0\r\n") != npos);

  SECTION("to an IPv6 server: CONNECT [::1]:port") {
    TlsServer v6(io, true, "::1");
    auto t6 = target("::1", v6.port());
    t6.proxy = proxy_at(proxy.port());
    auto r6 = connect(io, t6);
    INFO(r6.error);
    CHECK(r6.transport);
    CHECK(proxy.request.rfind("CONNECT [::1]:" + std::to_string(v6.port()) + " HTTP/1.1\r\n", 0) ==
          0);
    CHECK(proxy.request.find("\r\nHost: [::1]:" + std::to_string(v6.port()) + "\r\n") != npos);
  }
  SECTION("without credentials, no Proxy-Authorization") {
    t.proxy = proxy_at(proxy.port());
    auto plain = connect(io, t);
    CHECK(plain.transport);
    CHECK(proxy.request.find("Proxy-Authorization") == npos);
  }
}

TEST_CASE("connect_server: the proxy's refusals, silence and absence are classified",
          "[agent][server-connector][egress-proxy]") {
  asio::io_context io;
  TlsServer server(io, true);
  auto t = target("127.0.0.1", server.port(), 300ms);
  const std::string connect_to = "CONNECT 127.0.0.1:" + std::to_string(server.port());

  SECTION("407: credentials refused") {
    ConnectProxy proxy(io,
                       "HTTP/1.1 407 Proxy Authentication Required\r\n"
                       "Proxy-Authenticate: Basic realm=\"p\"\r\nContent-Length: 0\r\n\r\n");
    t.proxy = proxy_at(proxy.port(), "alice:wrong");
    auto r = connect(io, t);
    CHECK_FALSE(r.transport);
    REQUIRE(r.proxy_failure);
    CHECK(r.proxy_failure->reason == ProxyFailure::Auth);
    CHECK(r.proxy_failure->text ==
          "the proxy refused the user and password (407 Proxy Authentication Required)");
    CHECK(r.error == connect_to + ": the proxy answered 407 Proxy Authentication Required");
  }
  SECTION("403 with a body: refused") {
    ConnectProxy proxy(io,
                       "HTTP/1.1 403 Forbidden\r\nContent-Type: text/html\r\n"
                       "Content-Length: 12\r\n\r\nAccess denied");
    t.proxy = proxy_at(proxy.port());
    auto r = connect(io, t);
    REQUIRE(r.proxy_failure);
    CHECK(r.proxy_failure->reason == ProxyFailure::Refused);
    CHECK(r.proxy_failure->text == "the proxy refused the CONNECT (HTTP 403)");
  }
  SECTION("503: the proxy cannot reach the server") {
    ConnectProxy proxy(io, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
    t.proxy = proxy_at(proxy.port());
    auto r = connect(io, t);
    REQUIRE(r.proxy_failure);
    CHECK(r.proxy_failure->reason == ProxyFailure::ServerUnreachable);
    CHECK(r.proxy_failure->text == "the proxy could not reach the proxy-server (HTTP 503)");
  }
  SECTION("bytes after a 200 are refused, not dropped") {
    ConnectProxy proxy(io, "HTTP/1.1 200 OK\r\n\r\nsurprise");
    t.proxy = proxy_at(proxy.port());
    auto r = connect(io, t);
    CHECK_FALSE(r.transport);
    REQUIRE(r.proxy_failure);
    CHECK(r.proxy_failure->reason == ProxyFailure::Other);
    CHECK(r.error == connect_to + ": 8 bytes after the proxy's 200 answer, before TLS began");
  }
  SECTION("not HTTP") {
    ConnectProxy proxy(io, "SSH-2.0-OpenSSH_9.2\r\n\r\n");
    t.proxy = proxy_at(proxy.port());
    auto r = connect(io, t);
    REQUIRE(r.proxy_failure);
    CHECK(r.proxy_failure->reason == ProxyFailure::Other);
    CHECK(r.proxy_failure->text == "the proxy's answer to the CONNECT is not HTTP");
  }
  SECTION("the proxy's port is closed") {
    const auto port = konn::testsupport::free_tcp_port();
    t.proxy = proxy_at(port);
    auto r = connect(io, t);
    REQUIRE(r.proxy_failure);
    CHECK(r.proxy_failure->reason == ProxyFailure::ProxyUnreachable);
    CHECK(r.proxy_failure->text == "the proxy is unreachable");
    CHECK(r.error ==
          "dial tcp 127.0.0.1:" + std::to_string(port) + ": connect: connection refused");
  }
  SECTION("the proxy accepts and never answers") {
    SilentServer silent(io);
    t.proxy = proxy_at(silent.port());
    std::chrono::milliseconds elapsed{};
    auto r = connect(io, t, &elapsed);
    CHECK_FALSE(r.transport);
    REQUIRE(r.proxy_failure);
    CHECK(r.proxy_failure->reason == ProxyFailure::Timeout);
    CHECK(r.proxy_failure->text ==
          "no tunnel within --server-connect-timeout (300ms): the proxy did not answer the "
          "CONNECT, or the server did not finish TLS");
    CHECK(r.error ==
          "timed out after 300ms (waiting for the proxy's answer to " + connect_to + ")");
    CHECK(elapsed >= 290ms);
    CHECK(elapsed < 1300ms);
  }
  SECTION("a TLS failure behind the proxy counts as other") {
    TlsServer plain(io, false);
    ConnectProxy proxy(io, "HTTP/1.1 200 Connection established\r\n\r\n");
    t.port = plain.port();
    t.proxy = proxy_at(proxy.port());
    auto r = connect(io, t);
    CHECK_FALSE(r.transport);
    REQUIRE(r.proxy_failure);
    CHECK(r.proxy_failure->reason == ProxyFailure::Other);
    CHECK(r.proxy_failure->text.empty());
    CHECK(r.error == "no HTTP/2 (ALPN h2) from 127.0.0.1:" + std::to_string(plain.port()));
  }
}

TEST_CASE("make_server_client_context names the file it cannot use", "[agent][server-connector]") {
  konn::testsupport::TempDir dir{"konn-connector"};
  const auto& certs = konn::testsupport::test_certs();
  try {
    konn::agent::make_server_client_context(dir.file("missing-ca.crt"), "", "");
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find(dir.file("missing-ca.crt")) != npos);
  }
  try {
    // A key that is not the certificate's.
    konn::agent::make_server_client_context(certs.ca_crt, certs.agent_crt, certs.server_key);
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).rfind(certs.server_key + ": client key", 0) == 0);
  }
  CHECK(konn::agent::make_server_client_context("", "", ""));  // the system's roots
}
