// Draining: an agent on SIGTERM (no new dials while another agent serves, open tunnels finish,
// still the fallback when every agent drains, exit on a second signal or --drain-timeout) and
// the server on SIGTERM (not ready, no new frontends, open tunnels finish, exit by the
// graceful timeout; a second signal exits at once).
#include <csignal>

#include <catch2/catch.hpp>

#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/ha/ha_test_util.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/support/echo_server.h"

using namespace konn::e2e;
using konn::testclient::Tunnel;
using konn::testsupport::eventually;

namespace {

void echo_once(Tunnel& t, const std::string& payload) {
  REQUIRE(t.write(payload));
  std::string got;
  while (got.size() < payload.size()) {
    std::string chunk;
    REQUIRE(t.read_for(&chunk, 10s) == Tunnel::ReadStatus::Data);
    got += chunk;
  }
  CHECK(got == payload);
}

}  // namespace

// reliability: proxy-agent | SIGTERM of one of two agents | DRAIN to the server; it stays up
// reliability+: after its last tunnel closed, and takes new dials again once the other agent is
// reliability+: gone; a second signal exits 0 | agent info "signal 15: draining; ...", "signal 15
// reliability+: again: exiting now"; server info "agent leaving is draining: ..." | its open
// reliability+: tunnel; new dials go to the other agent while it serves
TEST_CASE(
    "drain: a draining agent gets no new dials while another serves, its open tunnel finishes, "
    "and it stays up as the fallback",
    "[e2e][ha][drain]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-ha"};
  konn::testsupport::EchoServer echo;
  FleetServer s(certs, "s1", {});
  s.start();
  FleetAgent a(dir, certs, "leaving", s.agent_port(), {});
  auto b = std::make_unique<FleetAgent>(dir, certs, "staying", s.agent_port(),
                                        std::vector<std::string>{});
  REQUIRE(eventually([&] { return s.ready_agents() == 2; }, 20s));
  auto ch = s.channel();

  // Open tunnels until one runs through the agent that will leave.
  std::unique_ptr<Tunnel> on_a;
  std::vector<std::unique_ptr<Tunnel>> others;
  for (int i = 0; i < 40 && !on_a; ++i) {
    int before = a.dials();
    auto t = echo_tunnel(ch, echo.address());
    if (a.dials() > before) {
      on_a = std::move(t);
    } else {
      others.push_back(std::move(t));
    }
  }
  REQUIRE(on_a);

  a.process().kill(SIGTERM);
  REQUIRE(s.process().wait_for_log("agent leaving is draining", 10s));
  int a_dials = a.dials();
  int b_dials = b->dials();
  for (int i = 0; i < 12; ++i) echo_tunnel(ch, echo.address())->close();
  CHECK(eventually([&] { return b->dials() == b_dials + 12; }, 10s));
  CHECK(a.dials() == a_dials);

  // The draining agent's tunnel still carries bytes both ways, then ends cleanly.
  echo_once(*on_a, "still draining");
  CHECK(on_a->close().empty());
  for (auto& t : others) echo_once(*t, "the other agent is still here");
  others.clear();
  // With no tunnel left it stays up: the process runs and the server still counts it.
  CHECK(a.process().running());
  CHECK(a.servers() == 1);

  // The other agent leaves at once: the draining agent is the only one, and takes every dial.
  b.reset();
  REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));
  for (int i = 0; i < 5; ++i) echo_tunnel(ch, echo.address())->close();
  CHECK(eventually([&] { return a.dials() == a_dials + 5; }, 10s));

  a.process().kill(SIGTERM);
  CHECK(a.process().wait_exit(20s) == 0);
  CHECK(a.process().count_in_log("signal 15 again: exiting now") == 1);
}

// reliability: proxy-agent | SIGTERM of the only agent while a webhook-like client keeps dialling
// reliability+: | every dial served during the drain; exit 0 at --drain-timeout or on a second
// reliability+: signal | agent info "signal 15: draining; serving until a second signal or
// reliability+: --drain-timeout (3s)", "drain timeout (3s) reached: exiting with 0 endpoint
// reliability+: connection(s)" | every dial until the agent exits
TEST_CASE("drain: with one agent, a webhook-like workload keeps working through its drain",
          "[e2e][ha][drain]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-ha"};
  konn::testsupport::EchoServer echo;
  FleetServer s(certs, "s1", {});
  s.start();

  // One webhook call: a new tunnel, a request, its answer, the tunnel closed.
  auto webhook_for = [&](std::chrono::milliseconds how_long) {
    auto ch = s.channel();
    int calls = 0;
    auto until = std::chrono::steady_clock::now() + how_long;
    while (std::chrono::steady_clock::now() < until) {
      auto t = echo_tunnel(ch, echo.address(), "admission review " + std::to_string(calls));
      CHECK(t->close().empty());
      ++calls;
    }
    return calls;
  };

  SECTION("until --drain-timeout") {
    FleetAgent a(dir, certs, "only", s.agent_port(), {"--drain-timeout=3s"});
    REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));
    CHECK(webhook_for(300ms) > 0);
    auto sigterm = std::chrono::steady_clock::now();
    a.process().kill(SIGTERM);
    REQUIRE(s.process().wait_for_log("agent only is draining", 10s));
    // Every call during the drain succeeds (echo_tunnel REQUIREs each round trip).
    int calls = webhook_for(2s);
    CHECK(calls > 5);
    WARN(calls << " webhook calls in the first 2 s of the drain, every one answered");
    CHECK(a.process().running());
    CHECK(a.process().wait_exit(20s) == 0);
    auto lasted = std::chrono::steady_clock::now() - sigterm;
    CHECK(lasted >= 3s);
    CHECK(a.process().count_in_log("drain timeout (3s) reached: exiting") == 1);
    // Gone now: the server has no agent left.
    CHECK(eventually([&] { return s.ready_agents() == 0; }, 10s));
    auto late = Tunnel::dial(s.channel(), echo.address(), 5s);
    CHECK_FALSE(late.tunnel);
  }

  SECTION("until a second signal") {
    FleetAgent a(dir, certs, "only", s.agent_port(), {});
    REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));
    a.process().kill(SIGTERM);
    REQUIRE(s.process().wait_for_log("agent only is draining", 10s));
    CHECK(webhook_for(2s) > 5);
    CHECK(a.process().running());
    CHECK(a.process().count_in_log("serving until a second signal") == 1);
    a.process().kill(SIGTERM);
    CHECK(a.process().wait_exit(20s) == 0);
    CHECK(a.process().count_in_log("again: exiting now") == 1);
    CHECK(eventually([&] { return s.ready_agents() == 0; }, 10s));
  }
}

// reliability: proxy-server | SIGTERM with a tunnel open | /readyz 503 "[-]shutdown failed", new
// reliability+: frontends refused, exit 0 after the tunnel | info "draining: not ready, ...",
// reliability+: "drained: no tunnel left" | the open tunnel, /healthz 200
TEST_CASE(
    "drain: server SIGTERM turns not ready, refuses new frontends, lets the open tunnel "
    "finish, then exits",
    "[e2e][ha][drain]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-ha"};
  konn::testsupport::EchoServer echo;
  // The timeout is far beyond the test: the server must leave because the tunnel ended.
  FleetServer s(certs, "s1", {"--graceful-shutdown-timeout=5m"});
  s.start();
  FleetAgent a(dir, certs, "a1", s.agent_port(), {});
  REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));
  CHECK(http_get_local(s.health_port(), "/readyz").status == 200);
  auto t = echo_tunnel(s.channel(), echo.address());

  s.process().kill(SIGTERM);
  REQUIRE(s.process().wait_for_log("draining: not ready", 10s));
  auto ready = http_get_local(s.health_port(), "/readyz?verbose");
  CHECK(ready.status == 503);
  CHECK(ready.body.find("[-]shutdown failed: server is shutting down") != std::string::npos);
  CHECK(http_get_local(s.health_port(), "/healthz").status == 200);
  // No new frontend: the listener is gone.
  auto late = Tunnel::dial(s.channel(false), echo.address(), 3s);
  CHECK_FALSE(late.tunnel);
  // The open tunnel still works, and the server leaves once it is closed.
  echo_once(*t, "after SIGTERM");
  CHECK(s.process().running());
  CHECK(t->close().empty());
  CHECK(s.process().wait_exit(60s) == 0);
  CHECK(s.process().count_in_log("drained: no tunnel left") == 1);
}

TEST_CASE("drain: server graceful timeout closes what is left, a second signal exits at once",
          "[e2e][ha][drain]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-ha"};
  konn::testsupport::EchoServer echo;

  // reliability: proxy-server | SIGTERM, tunnel still open at --graceful-shutdown-timeout | tunnel
  // reliability+: closed, exit 0 | info "graceful shutdown timeout: closing 1 tunnel(s)" | nothing:
  // reliability+: it exits
  SECTION("timeout") {
    FleetServer s(certs, "s1", {"--graceful-shutdown-timeout=1s"});
    s.start();
    FleetAgent a(dir, certs, "a1", s.agent_port(), {});
    REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));
    auto t = echo_tunnel(s.channel(), echo.address());
    s.process().kill(SIGTERM);
    CHECK(s.process().wait_exit(60s) == 0);
    CHECK(s.process().count_in_log("graceful shutdown timeout: closing 1 tunnel(s)") == 1);
    CHECK(eventually([&] { return t->ended(); }, 20s));
  }
  // reliability: proxy-server | a second signal while draining | exit 1 at once | warn "signal 2
  // reliability+: again: exiting now" | nothing: it exits
  SECTION("second signal") {
    FleetServer s(certs, "s1", {"--graceful-shutdown-timeout=5m"});
    s.start();
    FleetAgent a(dir, certs, "a1", s.agent_port(), {});
    REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));
    auto t = echo_tunnel(s.channel(), echo.address());
    s.process().kill(SIGTERM);
    REQUIRE(s.process().wait_for_log("draining: not ready", 10s));
    s.process().kill(SIGINT);
    CHECK(s.process().wait_exit(20s) == 1);
    CHECK(s.process().count_in_log("again: exiting now") == 1);
  }
}
