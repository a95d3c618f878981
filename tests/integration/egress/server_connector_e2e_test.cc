// The agent's connector (proxy-agent/server_connector.h) against real peers: a built proxy-server
// (gRPC C++'s TLS with ALPN h2 and the agent's client certificate required), reached directly and
// through squid and tinyproxy, whose refusals it classifies with the words the agent logs.
#include <chrono>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "core/io/asio_compat.h"
#include "proxy-agent/server_connector.h"
#include "tests/integration/egress/egress_proxies.h"
#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/support/loopback.h"
#include "tests/support/test_certs.h"

using namespace konn::e2e;
using konn::agent::ProxyFailure;
using konn::agent::ServerConnectResult;
using konn::agent::ServerConnectTarget;
using konn::testsupport::eventually;

namespace {

ServerConnectTarget target(uint16_t port, const std::string& proxy_url = "") {
  const auto& certs = konn::testsupport::test_certs();
  ServerConnectTarget t;
  t.host = "127.0.0.1";
  t.port = port;
  t.tls = konn::agent::make_server_client_context(certs.ca_crt, certs.agent_crt, certs.agent_key);
  t.timeout = 5s;
  if (!proxy_url.empty()) {
    std::string error;
    t.proxy = konn::agent::parse_proxy_url(proxy_url, &error);
    REQUIRE(t.proxy);
  }
  return t;
}

ServerConnectResult connect(ServerConnectTarget t) {
  // Outlives every result: a transport's socket and timers belong to it.
  static asio::io_context io;
  io.restart();
  std::optional<ServerConnectResult> result;
  asio::co_spawn(io, konn::agent::connect_server(io.get_executor(), std::move(t)),
                 [&](std::exception_ptr e, ServerConnectResult r) {
                   if (!e) result = std::move(r);
                 });
  io.run_for(10s);
  REQUIRE(result);
  return std::move(*result);
}

void check_refused(const ServerConnectResult& r, ProxyFailure::Reason reason,
                   const std::string& text) {
  INFO(r.error);
  CHECK_FALSE(r.transport);
  REQUIRE(r.proxy_failure);
  CHECK(r.proxy_failure->reason == reason);
  CHECK(r.proxy_failure->text == text);
}

}  // namespace

TEST_CASE("server connector: TLS with ALPN h2 to a proxy-server, directly and through squid",
          "[e2e][egress]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  FleetServer server(certs, "s1", {});
  server.start();
  SECTION("directly") {
    auto r = connect(target(server.agent_port()));
    INFO(r.error);
    CHECK(r.transport);
  }
  SECTION("through squid with Basic auth; squid logged the tunnel") {
    SquidProxy squid({"alice", "p@ss:w%rd", {}, {}});
    auto r = connect(target(server.agent_port(), squid.url("alice:p%40ss%3Aw%25rd")));
    INFO(r.error);
    REQUIRE(r.transport);
    r.transport->close();  // squid writes a CONNECT's line when its tunnel ends
    CHECK(eventually([&] { return squid.access_log().find("TCP_TUNNEL/200") != std::string::npos; }, 5s));
    CHECK(squid.access_log().find("CONNECT 127.0.0.1:" + std::to_string(server.agent_port()) +
                                  " alice ") != std::string::npos);
  }
}

TEST_CASE("server connector: squid's 407, 403 and 503 are classified as the agent logs them",
          "[e2e][egress]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  FleetServer server(certs, "s1", {});
  server.start();
  const uint16_t refused_port = konn::testsupport::free_tcp_port();
  SquidProxy squid({"alice", "secret", {refused_port}, {}});
  check_refused(connect(target(server.agent_port(), squid.url("alice:wrong"))), ProxyFailure::Auth,
                "the proxy refused the user and password (407 Proxy Authentication Required)");
  check_refused(connect(target(server.agent_port(), squid.url())), ProxyFailure::Auth,
                "the proxy requires a user and password (407 Proxy Authentication Required)");
  check_refused(connect(target(refused_port, squid.url("alice:secret"))), ProxyFailure::Refused,
                "the proxy refused the CONNECT (HTTP 403)");
  // Allowed, but nothing listens there: squid cannot reach the "server".
  const uint16_t closed_port = konn::testsupport::free_tcp_port();
  check_refused(connect(target(closed_port, squid.url("alice:secret"))),
                ProxyFailure::ServerUnreachable,
                "the proxy could not reach the proxy-server (HTTP 503)");
}

TEST_CASE("server connector: through tinyproxy, and its 401 and 403", "[e2e][egress]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  FleetServer server(certs, "s1", {});
  server.start();
  const std::string connect_line =
      "CONNECT 127.0.0.1:" + std::to_string(server.agent_port()) + " HTTP/1.1";
  SECTION("with BasicAuth") {
    Tinyproxy proxy({"alice", "secret", {}, {server.agent_port()}});
    auto r = connect(target(server.agent_port(), proxy.url("alice:secret")));
    INFO(r.error);
    CHECK(r.transport);
    CHECK(proxy.log().find(connect_line) != std::string::npos);
  }
  SECTION("wrong credentials: 401") {
    Tinyproxy proxy({"alice", "secret", {}, {}});
    check_refused(connect(target(server.agent_port(), proxy.url("alice:wrong"))),
                  ProxyFailure::Auth,
                  "the proxy refused the user and password (HTTP 401 Unauthorized)");
  }
  SECTION("a port outside ConnectPort: 403") {
    Tinyproxy proxy({"", "", {}, {server.agent_port()}});
    check_refused(connect(target(konn::testsupport::free_tcp_port(), proxy.url())),
                  ProxyFailure::Refused, "the proxy refused the CONNECT (HTTP 403)");
  }
}
