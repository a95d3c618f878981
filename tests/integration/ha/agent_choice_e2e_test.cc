// --agent-choice end to end, through real agents: the tunnels one agent carries keep new dials
// away from it (least-loaded), and random ignores them (upstream's choice). Dials are counted on
// the agents' own /metrics.
#include <csignal>
#include <future>

#include <catch2/catch.hpp>

#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/ha/ha_test_util.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/support/echo_server.h"
#include "tests/support/loopback.h"

using namespace konn::e2e;
using konn::testsupport::eventually;

namespace {

bool agent_joined(FleetServer& s, const std::string& agent) {
  return s.process().wait_for_log("agent connected agentID=" + agent + " ", 20s);
}

struct Spread {
  int busy = 0;    // dials the agent holding the open tunnels took
  int others = 0;  // dials the two idle agents took
  int b = 0;
  int c = 0;
};

// One agent ("busy") comes first and is given `held` tunnels, kept open; two more join; then
// `dials` short echo tunnels are opened and closed one after the other.
Spread spread_with_one_busy_agent(const std::string& choice, int held, int dials) {
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-ha"};
  konn::testsupport::EchoServer echo;
  FleetServer s(certs, "s-" + choice, {"--agent-choice=" + choice});
  s.start();
  REQUIRE(s.process().wait_for_log("agent-choice=" + choice, 10s));
  FleetAgent a(dir, certs, "busy", s.agent_port(), {});
  REQUIRE(agent_joined(s, "busy"));
  auto ch = s.channel();
  std::vector<std::unique_ptr<konn::testclient::Tunnel>> open;
  for (int i = 0; i < held; ++i) open.push_back(echo_tunnel(ch, echo.address()));
  REQUIRE(eventually([&] { return a.dials() == held; }, 10s));
  FleetAgent b(dir, certs, "idle-b", s.agent_port(), {});
  FleetAgent c(dir, certs, "idle-c", s.agent_port(), {});
  REQUIRE(agent_joined(s, "idle-b"));
  REQUIRE(agent_joined(s, "idle-c"));
  for (int i = 0; i < dials; ++i) echo_tunnel(ch, echo.address())->close();
  REQUIRE(eventually([&] { return a.dials() + b.dials() + c.dials() == held + dials; }, 10s));
  Spread out{a.dials() - held, b.dials() + c.dials(), b.dials(), c.dials()};
  for (auto& t : open) t->close();
  return out;
}

}  // namespace

TEST_CASE(
    "agent choice: an agent holding open tunnels gets no new dials with least-loaded, "
    "its third with random",
    "[e2e][ha][strategy]") {
  KONN_REQUIRE_DAEMONS();
  constexpr int kHeld = 8;
  constexpr int kDials = 30;
  SECTION("least-loaded (default)") {
    auto got = spread_with_one_busy_agent("least-loaded", kHeld, kDials);
    // Each short dial is closed before the next: an idle agent carries at most a closing tunnel
    // or two, far fewer than the 8 held, so every pair with an idle agent picks it.
    CHECK(got.busy == 0);
    CHECK(got.others == kDials);
    CHECK(got.b > 0);  // the two idle agents share the dials (a miss: 2^-29)
    CHECK(got.c > 0);
  }
  SECTION("random") {
    auto got = spread_with_one_busy_agent("random", kHeld, kDials);
    // Uniform: the busy agent gets about 10 of the 30; none has probability (2/3)^30 = 5e-6.
    CHECK(got.busy > 0);
    CHECK(got.busy + got.others == kDials);
  }
}

TEST_CASE("agent choice: an agent whose dials hang gets no new dials with least-loaded",
          "[e2e][ha][strategy]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-ha"};
  konn::testsupport::EchoServer echo;
  konn::testsupport::StuckListener stuck;  // its connects never complete
  FleetServer s(certs, "s-pending", {});
  s.start();
  FleetAgent a(dir, certs, "stalled", s.agent_port(), {"--dial-timeout=60s"});
  REQUIRE(agent_joined(s, "stalled"));
  auto ch = s.channel();
  // The only agent takes dials that hang: they stay pending (no DIAL_RSP) on its stream.
  constexpr int kHung = 6;
  const std::string nowhere = "127.0.0.1:" + std::to_string(stuck.port());
  std::vector<std::future<std::string>> hung;
  for (int i = 0; i < kHung; ++i) {
    hung.push_back(std::async(std::launch::async, [&ch, &nowhere] {
      auto d = konn::testclient::Tunnel::dial(ch, nowhere, 60s);
      if (d.tunnel) d.tunnel->close();
      return d.error;
    }));
  }
  REQUIRE(eventually([&] { return s.metric(kServer + "pending_backend_dials") == kHung; }, 10s));
  REQUIRE(a.dials() == kHung);
  FleetAgent b(dir, certs, "idle-b", s.agent_port(), {});
  FleetAgent c(dir, certs, "idle-c", s.agent_port(), {});
  REQUIRE(agent_joined(s, "idle-b"));
  REQUIRE(agent_joined(s, "idle-c"));
  constexpr int kDials = 30;
  for (int i = 0; i < kDials; ++i) echo_tunnel(ch, echo.address())->close();
  CHECK(eventually([&] { return b.dials() + c.dials() == kDials; }, 10s));
  CHECK(a.dials() == kHung);  // its 6 pending dials weigh more than anything b or c carries
  CHECK(b.dials() > 0);
  CHECK(c.dials() > 0);
  // The stalled agent goes: its pending dials are answered at once.
  a.process().kill(SIGKILL);
  for (auto& h : hung) {
    REQUIRE(h.wait_for(20s) == std::future_status::ready);
    CHECK_FALSE(h.get().empty());
  }
}
