// --proxy-strategies end to end: which agent gets each dial (counted on the agents' own
// /metrics), and "No agent available" when no strategy matches.
#include <catch2/catch.hpp>

#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/ha/ha_test_util.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/support/echo_server.h"
#include "tests/support/loopback.h"

using namespace konn::e2e;
using konn::testclient::Tunnel;
using konn::testsupport::eventually;

namespace {

// Dials `address`; returns the error text ("" when the dial succeeded, the tunnel then closed).
std::string dial_error(const std::shared_ptr<grpc::Channel>& ch, const std::string& address) {
  auto d = Tunnel::dial(ch, address, 10s);
  if (d.tunnel) d.tunnel->close();
  return d.error;
}

bool connected(FleetServer& s, const std::string& agent) {
  return s.process().wait_for_log("agent connected agentID=" + agent + " ", 20s);
}

}  // namespace

// reliability: proxy-server | dial no --proxy-strategies entry can place | DIAL_RSP error `No agent
// reliability+: available` | info "dial to ... failed: No agent available" | dials the strategies
// reliability+: can place
TEST_CASE(
    "strategy destHost,defaultRoute: ipv4, host and cidr identifiers, then the default "
    "route, else No agent available",
    "[e2e][ha][strategy]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-ha"};
  konn::testsupport::EchoServer echo;
  std::string port = std::to_string(konn::testsupport::free_tcp_port());  // nothing listens
  FleetServer s(certs, "s1", {"--proxy-strategies=destHost,defaultRoute"});
  s.start();
  FleetAgent a(dir, certs, "ipv4-a", s.agent_port(),
               {"--agent-identifiers=ipv4=127.0.0.1&host=localhost"});
  FleetAgent b(dir, certs, "cidr-b", s.agent_port(), {"--agent-identifiers=cidr=127.0.1.0/24"});
  REQUIRE(connected(s, "ipv4-a"));
  REQUIRE(connected(s, "cidr-b"));
  auto ch = s.channel();

  // ipv4= routes the echo origin's address to a.
  for (int i = 0; i < 3; ++i) echo_tunnel(ch, echo.address())->close();
  CHECK(eventually([&] { return a.dials() == 3; }, 10s));
  CHECK(b.dials() == 0);
  // host= matches the name; the dial itself fails on a (nothing listens there).
  CHECK_FALSE(dial_error(ch, "localhost:" + port).empty());
  CHECK(eventually([&] { return a.dials() == 4; }, 10s));
  // cidr= routes any address of the block to b (upstream accepts cidr= but never routes by it).
  std::string refused = dial_error(ch, "127.0.1.7:" + port);
  CHECK(refused.find("No agent available") == std::string::npos);
  CHECK(eventually([&] { return b.dials() == 1; }, 10s));
  // Neither strategy matches: no default-route agent yet.
  CHECK(dial_error(ch, "127.0.0.9:" + port).find("No agent available") != std::string::npos);
  CHECK(dial_error(ch, "elsewhere.example:443").find("No agent available") != std::string::npos);
  CHECK(s.metric("konnectivity_network_proxy_server_dial_failure_count",
                 {{"reason", "no_agent"}}) == 2);

  // A default-route agent takes what destHost cannot place, and only that.
  FleetAgent c(dir, certs, "route-c", s.agent_port(), {"--agent-identifiers=default-route=true"});
  REQUIRE(connected(s, "route-c"));
  CHECK_FALSE(dial_error(ch, "127.0.0.9:" + port).empty());
  CHECK(eventually([&] { return c.dials() == 1; }, 10s));
  echo_tunnel(ch, echo.address())->close();
  CHECK(eventually([&] { return a.dials() == 5; }, 10s));
  CHECK(b.dials() == 1);
  CHECK(c.dials() == 1);
  // As upstream, destHost counts distinct identifiers (127.0.0.1, localhost, konn's cidr), not
  // agents; defaultRoute counts agents.
  CHECK(s.metric("konnectivity_network_proxy_server_ready_backends",
                 {{"proxy_strategy", "destHost"}}) == 3);
  CHECK(s.metric("konnectivity_network_proxy_server_ready_backends",
                 {{"proxy_strategy", "defaultRoute"}}) == 1);
  // An agent claiming what a already claims adds no identifier, but one more agent.
  FleetAgent d(dir, certs, "twin-d", s.agent_port(),
               {"--agent-identifiers=host=localhost&ipv4=127.0.0.1"});
  REQUIRE(connected(s, "twin-d"));
  CHECK(eventually(
      [&] { return s.metric("konnectivity_network_proxy_server_ready_backend_connections") == 4; },
      10s));
  CHECK(s.metric("konnectivity_network_proxy_server_ready_backends",
                 {{"proxy_strategy", "destHost"}}) == 3);
}

TEST_CASE(
    "strategy default spreads dials over every agent, defaultRoute alone needs a "
    "default-route agent",
    "[e2e][ha][strategy]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-ha"};
  konn::testsupport::EchoServer echo;
  FleetServer any(certs, "any", {"--proxy-strategies=default"});
  any.start();
  FleetServer routed(certs, "routed", {"--proxy-strategies=defaultRoute"});
  routed.start();
  FleetAgent a(dir, certs, "plain-a", any.agent_port(), {"--agent-identifiers=ipv4=10.0.0.1"});
  FleetAgent b(dir, certs, "plain-b", any.agent_port(), {});
  FleetAgent c(dir, certs, "plain-c", routed.agent_port(), {"--agent-identifiers=host=c"});
  REQUIRE(connected(any, "plain-a"));
  REQUIRE(connected(any, "plain-b"));
  REQUIRE(connected(routed, "plain-c"));

  auto ch = any.channel();
  for (int i = 0; i < 24; ++i) echo_tunnel(ch, echo.address())->close();
  CHECK(eventually([&] { return a.dials() + b.dials() == 24; }, 10s));
  CHECK(a.dials() > 0);  // random choice: both are used (a miss has probability 2^-23)
  CHECK(b.dials() > 0);

  CHECK(dial_error(routed.channel(), echo.address()).find("No agent available") !=
        std::string::npos);
  CHECK(c.dials() == 0);
  // Not ready: the first (only) strategy cannot route anywhere.
  auto ready = http_get_local(routed.health_port(), "/readyz");
  CHECK(ready.status == 503);
  CHECK(ready.body.find("[-]backends failed") != std::string::npos);
}
