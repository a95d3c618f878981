// Agents behind an egress HTTP proxy: the built proxy-agent reaches its proxy-servers through
// squid and tinyproxy (started here on loopback), with and without Basic authentication; the
// proxy's refusals, an unreachable proxy and a silent one each give one clear, retried log line.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/kube/lease.h"
#include "tests/integration/egress/egress_proxies.h"
#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/ha/ha_test_util.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/support/echo_server.h"
#include "tests/support/fake_apiserver.h"
#include "tests/support/loopback.h"
#include "tests/support/tcp_balancer.h"

using namespace konn::e2e;
using konn::testsupport::eventually;
using konn::testsupport::FakeApiserver;
using konn::testsupport::TcpBalancer;
using nlohmann::json;

namespace {

constexpr auto kNpos = std::string::npos;

// The start of the agent's line for a failed attempt to 127.0.0.1:<server_port> through a proxy
// given with --proxy-url (shown as `redacted_url`).
std::string failure_line(uint16_t server_port, const std::string& redacted_url) {
  return "cannot connect to proxy-server 127.0.0.1:" + std::to_string(server_port) +
         " through HTTP proxy " + redacted_url + " (from --proxy-url): ";
}

int readyz(const FleetAgent& agent) {
  return http_get_local(agent.health_port(), "/readyz").status;
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != kNpos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The agent keeps running and retrying, is not ready, and counts the failures under `reason`
// (konn_agent_egress_proxy_failures_total).
void check_failing(FleetAgent& agent, const std::string& line, const std::string& reason) {
  INFO(agent.process().log());
  CHECK(agent.process().wait_for_log(line, 10s, 2));  // logged, then logged again: retried
  CHECK(agent.process().running());
  CHECK(readyz(agent) == 503);
  CHECK(agent.metric("konn_agent_egress_proxy_failures_total", {{"reason", reason}}).value_or(0) >=
        2);
}

}  // namespace

TEST_CASE(
    "egress: the agent reaches its server through squid with Basic auth and a tunnel "
    "carries bytes",
    "[e2e][egress]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-egress"};
  konn::testsupport::EchoServer echo;
  // A password with characters a URL must escape: the agent decodes them itself (gRPC would
  // split the URL at each '@').
  SquidProxy squid({"alice", "p@ss:w%rd", {}, {}});
  FleetServer server(certs, "s1", {});
  server.start();
  // The flag wins: neither NO_PROXY nor gRPC's own variables may take the server off the proxy.
  FleetAgent agent(dir, certs, "a1", server.agent_port(),
                   {"--proxy-url=" + squid.url("alice:p%40ss%3Aw%25rd")},
                   {{"NO_PROXY", "127.0.0.1"},
                    {"no_proxy", "127.0.0.1"},
                    {"no_grpc_proxy", "127.0.0.1"},
                    {"https_proxy", "http://127.0.0.1:1"}});
  INFO(agent.process().log());
  REQUIRE(eventually([&] { return agent.servers() == 1; }, 10s));
  CHECK(readyz(agent) == 200);
  REQUIRE(eventually([&] { return server.ready_agents() == 1; }, 10s));
  echo_tunnel(server.channel(), echo.address(), std::string(size_t{256} * 1024, 'x'))->close();
  CHECK(agent.process().log().find("egress HTTP proxy towards the proxy-servers: http://alice@" +
                                   squid.url().substr(7) + " (from --proxy-url)") != kNpos);
  CHECK(agent.process().log().find("p@ss") == kNpos);

  // squid writes a tunnel's line when the tunnel ends.
  agent.stop();
  INFO(squid.access_log());
  CHECK(eventually([&] { return squid.access_log().find("TCP_TUNNEL/200") != kNpos; }, 5s));
  CHECK(squid.access_log().find("CONNECT 127.0.0.1:" + std::to_string(server.agent_port()) +
                                " alice ") != kNpos);
}

TEST_CASE(
    "egress: two servers through one squid without authentication, counted by "
    "--server-count or by their Leases",
    "[e2e][egress]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-egress"};
  konn::testsupport::EchoServer echo;
  FakeApiserver api(certs.server_crt, certs.server_key, "lease-caller");
  SquidProxy squid({});
  std::vector<std::string> server_args;
  std::vector<std::string> agent_args{"--proxy-url=" + squid.url()};
  SECTION("--server-count=2") { server_args = {"--server-count=2"}; }
  SECTION("--count-server-leases, the servers saying 1") {
    // Two valid Leases are all that tells the agent there is a second server. The lease list
    // goes to kube-apiserver directly, not through the proxy.
    server_args = {"--server-count=1"};
    for (const char* id : {"s1", "s2"}) {
      json lease = {
          {"apiVersion", "coordination.k8s.io/v1"},
          {"kind", "Lease"},
          {"metadata",
           {{"name", std::string("konnectivity-proxy-server-") + id},
            {"labels", {{"k8s-app", "konnectivity-server"}}}}},
          {"spec",
           {{"holderIdentity", id},
            {"leaseDurationSeconds", 3600},
            {"renewTime", konn::core::kube::format_micro_time(std::chrono::system_clock::now())}}}};
      api.put_lease("kube-system", lease.dump());
    }
    agent_args.insert(
        agent_args.end(),
        {"--count-server-leases", "--kubeconfig=" + api.write_kubeconfig(dir.path(), certs.ca_crt),
         "--lease-poll-interval=1s"});
  }
  TcpBalancer lb;
  std::vector<std::unique_ptr<FleetServer>> servers;
  for (const char* id : {"s1", "s2"}) {
    servers.push_back(std::make_unique<FleetServer>(certs, id, server_args));
    servers.back()->start();
  }
  lb.set_backends({servers[0]->agent_port(), servers[1]->agent_port()});
  FleetAgent agent(dir, certs, "a1", lb.port(), agent_args);
  INFO(agent.process().log());
  REQUIRE(eventually([&] { return agent.servers() == 2; }, 20s));
  CHECK(readyz(agent) == 200);
  CHECK(agent.metric("konnectivity_network_proxy_agent_known_server_count") == 2);
  for (auto& s : servers) {
    INFO("server " << s->id());
    REQUIRE(eventually([&] { return s->ready_agents() == 1; }, 10s));
    echo_tunnel(s->channel(), echo.address())->close();
  }
  agent.stop();
  const std::string tunnel = "TCP_TUNNEL/200";
  INFO(squid.access_log());
  CHECK(eventually([&] { return count(squid.access_log(), tunnel) >= 2; }, 5s));
  CHECK(count(squid.access_log(), "CONNECT 127.0.0.1:" + std::to_string(lb.port()) + " - ") >= 2);
}

TEST_CASE(
    "egress: squid's 407 for wrong or missing credentials and 403 for a refused port are "
    "logged clearly, and the agent retries and stays unready",
    "[e2e][egress]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-egress"};
  const uint16_t refused_port = konn::testsupport::free_tcp_port();
  SquidProxy squid({"alice", "secret", {refused_port}, {}});
  FleetServer server(certs, "s1", {});
  server.start();

  // reliability: proxy-agent | egress proxy (squid) answers the CONNECT with 407: wrong
  // reliability+: password | no stream; /readyz 503 | warn "cannot connect to proxy-server ...
  // reliability+: through HTTP proxy http://alice@... (from --proxy-url): the proxy refused the
  // reliability+: user and password (407 Proxy Authentication Required); ...", no password |
  // reliability+: agent, retrying with the connect backoff
  SECTION("a wrong password") {
    FleetAgent agent(dir, certs, "a1", server.agent_port(),
                     {"--proxy-url=" + squid.url("alice:not-the-secret")});
    check_failing(agent,
                  failure_line(server.agent_port(), squid.url("alice")) +
                      "the proxy refused the user and password (407 Proxy "
                      "Authentication Required)",
                  "auth");
    CHECK(agent.process().log().find("not-the-secret") == kNpos);
    CHECK(server.ready_agents() == 0);
  }
  // reliability: proxy-agent | egress proxy (squid) answers 407 to a CONNECT without credentials |
  // reliability+: no stream; /readyz 503 | warn "...: the proxy requires a user and password (407
  // reliability+: Proxy Authentication Required); ..." | agent, retrying
  SECTION("no credentials") {
    FleetAgent agent(dir, certs, "a1", server.agent_port(), {"--proxy-url=" + squid.url()});
    check_failing(agent,
                  failure_line(server.agent_port(), squid.url()) +
                      "the proxy requires a user and password (407 Proxy "
                      "Authentication Required)",
                  "auth");
  }
  // reliability: proxy-agent | egress proxy refuses the CONNECT by its rules (squid ACL, tinyproxy
  // reliability+: ConnectPort) with 403 | no stream; /readyz 503 | warn "...: the proxy refused the
  // reliability+: CONNECT (HTTP 403); ..." | agent, retrying
  SECTION("a CONNECT the proxy's rules refuse") {
    FleetAgent agent(dir, certs, "a1", refused_port, {"--proxy-url=" + squid.url("alice:secret")});
    check_failing(
        agent,
        failure_line(refused_port, squid.url("alice")) + "the proxy refused the CONNECT (HTTP 403)",
        "refused");
  }
}

TEST_CASE(
    "egress: the agent through tinyproxy, with and without BasicAuth, and wrong credentials "
    "and a port outside ConnectPort are logged clearly",
    "[e2e][egress]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-egress"};
  konn::testsupport::EchoServer echo;
  FleetServer server(certs, "s1", {});
  server.start();
  const std::string connect_line =
      "CONNECT 127.0.0.1:" + std::to_string(server.agent_port()) + " HTTP/1.1";

  SECTION("with BasicAuth: a tunnel carries bytes and tinyproxy logged the CONNECT") {
    Tinyproxy proxy({"alice", "secret", {}, {server.agent_port()}});
    FleetAgent agent(dir, certs, "a1", server.agent_port(),
                     {"--proxy-url=" + proxy.url("alice:secret")});
    INFO(agent.process().log());
    REQUIRE(eventually([&] { return agent.servers() == 1; }, 10s));
    CHECK(readyz(agent) == 200);
    REQUIRE(eventually([&] { return server.ready_agents() == 1; }, 10s));
    echo_tunnel(server.channel(), echo.address(), std::string(size_t{256} * 1024, 'y'))->close();
    CHECK(proxy.log().find(connect_line) != kNpos);
  }
  SECTION("without authentication") {
    Tinyproxy proxy({});
    FleetAgent agent(dir, certs, "a1", server.agent_port(), {"--proxy-url=" + proxy.url()});
    INFO(agent.process().log());
    REQUIRE(eventually([&] { return agent.servers() == 1; }, 10s));
    REQUIRE(eventually([&] { return server.ready_agents() == 1; }, 10s));
    echo_tunnel(server.channel(), echo.address())->close();
    CHECK(proxy.log().find(connect_line) != kNpos);
  }
  // reliability: proxy-agent | egress proxy (tinyproxy) answers 401 to wrong BasicAuth
  // reliability+: credentials | no stream; /readyz 503 | warn "...: the proxy refused the user
  // reliability+: and password (HTTP 401 Unauthorized); ..." | agent, retrying
  SECTION("wrong credentials: tinyproxy answers 401") {
    Tinyproxy proxy({"alice", "secret", {}, {}});
    FleetAgent agent(dir, certs, "a1", server.agent_port(),
                     {"--proxy-url=" + proxy.url("alice:wrong")});
    check_failing(agent,
                  failure_line(server.agent_port(), proxy.url("alice")) +
                      "the proxy refused the user and password (HTTP 401 Unauthorized)",
                  "auth");
  }
  SECTION("a port outside ConnectPort: 403") {
    Tinyproxy proxy({"", "", {}, {server.agent_port()}});
    const uint16_t other_port = konn::testsupport::free_tcp_port();
    FleetAgent agent(dir, certs, "a1", other_port, {"--proxy-url=" + proxy.url()});
    check_failing(
        agent, failure_line(other_port, proxy.url()) + "the proxy refused the CONNECT (HTTP 403)",
        "refused");
  }
}

TEST_CASE(
    "egress: an unreachable proxy and a proxy that never answers are logged as such and "
    "retried",
    "[e2e][egress]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-egress"};
  FleetServer server(certs, "s1", {});
  server.start();

  // reliability: proxy-agent | egress proxy unreachable (closed port) | no stream; /readyz 503 |
  // reliability+: warn "...: the proxy is unreachable; ... Connection refused)" | agent,
  // reliability+: retrying
  SECTION("unreachable") {
    const std::string url =
        "http://127.0.0.1:" + std::to_string(konn::testsupport::free_tcp_port());
    FleetAgent agent(dir, certs, "a1", server.agent_port(), {"--proxy-url=" + url});
    check_failing(agent, failure_line(server.agent_port(), url) + "the proxy is unreachable",
                  "proxy_unreachable");
  }
  // reliability: proxy-agent | egress proxy accepts TCP and never answers the CONNECT | attempt
  // reliability+: ended after --server-connect-timeout; /readyz 503 | warn "...: no tunnel within
  // reliability+: --server-connect-timeout (300ms): the proxy did not answer the CONNECT, or the
  // reliability+: server did not finish TLS; ..." | agent, retrying
  SECTION("accepts the connection and never answers the CONNECT") {
    SilentListener silent;
    const std::string url = "http://127.0.0.1:" + std::to_string(silent.port());
    FleetAgent agent(dir, certs, "a1", server.agent_port(),
                     {"--proxy-url=" + url, "--server-connect-timeout=300ms"});
    check_failing(agent,
                  failure_line(server.agent_port(), url) +
                      "no tunnel within --server-connect-timeout (300ms): the proxy did "
                      "not answer the CONNECT, or the server did not finish TLS",
                  "timeout");
  }
}

TEST_CASE(
    "egress: HTTPS_PROXY leaves a loopback server direct, as in Go, and gRPC does not use "
    "https_proxy, http_proxy or grpc_proxy by itself",
    "[e2e][egress]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-egress"};
  konn::testsupport::EchoServer echo;
  SquidProxy squid({});
  FleetServer server(certs, "s1", {});
  server.start();
  FleetAgent agent(dir, certs, "a1", server.agent_port(), {},
                   {{"HTTPS_PROXY", squid.url()},
                    {"https_proxy", squid.url()},
                    {"http_proxy", squid.url()},
                    {"grpc_proxy", squid.url()}});
  INFO(agent.process().log());
  REQUIRE(eventually([&] { return agent.servers() == 1; }, 10s));
  REQUIRE(eventually([&] { return server.ready_agents() == 1; }, 10s));
  echo_tunnel(server.channel(), echo.address())->close();
  CHECK(agent.process().log().find("egress HTTP proxy towards the proxy-servers: " + squid.url() +
                                   " (from HTTPS_PROXY, no NO_PROXY; never for localhost and "
                                   "loopback)") != kNpos);
  agent.stop();
  // A tunnel through squid would be logged within milliseconds of the agent's exit.
  INFO(squid.access_log());
  CHECK_FALSE(eventually([&] { return squid.access_log().find("CONNECT") != kNpos; }, 500ms));
}
