// End-to-end failure handling: refused dials, a killed agent, a restarted server.
#include <atomic>
#include <csignal>
#include <thread>

#include <catch2/catch.hpp>

#include "test-client/http_get.h"
#include "test-client/tunnel.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/integration/tunnel/e2e_util.h"
#include "tests/integration/tunnel/tunnel_stack.h"
#include "tests/support/loopback.h"
#include "tests/support/sanitizers.h"

using namespace konn::e2e;
using konn::testclient::http_get;
using konn::testclient::Tunnel;
using konn::testsupport::eventually;
using konn::testsupport::kSlowFactor;
using konn::testsupport::scaled_bytes;
using Clock = std::chrono::steady_clock;

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

// reliability: proxy-agent | dial to a closed port | DIAL_RSP error "connection refused" within 1 s
// reliability+: | server info "dial to ... failed at the agent: ..."; agent info "closed: dial
// reliability+: failed: ..." | the next dial succeeds
TEST_CASE("e2e: a dial to a closed port fails with connection refused within 1 s", "[e2e]") {
  KONN_REQUIRE_DAEMONS();
  TunnelStack s;
  uint16_t closed = konn::testsupport::free_tcp_port();
  auto start = Clock::now();
  auto d = Tunnel::dial(s.channel, "127.0.0.1:" + std::to_string(closed), 5s);
  auto took = ms_between(start, Clock::now());
  CHECK_FALSE(d.tunnel);
  CHECK(d.error.find("connection refused") != std::string::npos);
  CHECK(took < 1000.0 * kSlowFactor);
  INFO("error: " << d.error);
  // The stack still works afterwards.
  auto ok = Tunnel::dial(s.channel, s.http.address(), 5s);
  CHECK(ok.error.empty());
}

// reliability: proxy-server | SIGKILL of the only agent mid-transfer, a dial pending | tunnel ends
// reliability+: (EOF) and the pending dial fails within 1 s, not by timeout | info "agent
// reliability+: disconnected agentID=agent-1: N tunnels closed, M pending dials failed" | server;
// reliability+: new dials answered `No agent available` at once
TEST_CASE("e2e: agent killed mid-transfer ends its tunnels and fails pending dials", "[e2e]") {
  KONN_REQUIRE_DAEMONS();
  AgentSpec agent;
  agent.extra_args = {"--v=4"};  // debug: the agent logs "dialing <address>"
  TunnelStack s({}, agent);

  auto a = Tunnel::dial(s.channel, s.echo.address(), 5s);
  REQUIRE(a.error.empty());
  Tunnel& t = *a.tunnel;
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    std::string block = random_bytes(256 * 1024, 7);
    while (!stop && t.write(block)) {
    }
  });
  std::string chunk;
  uint64_t got = 0;
  while (got < (16u << 20)) {
    REQUIRE(t.read_for(&chunk, 10s) == Tunnel::ReadStatus::Data);
    got += chunk.size();
  }

  // A dial that the agent cannot finish: the destination's accept queue is full.
  konn::testsupport::StuckListener stuck;
  std::string stuck_address = "127.0.0.1:" + std::to_string(stuck.port());
  Tunnel::DialResult pending;
  Clock::time_point pending_done;
  std::thread dialer([&] {
    pending = Tunnel::dial(s.channel, stuck_address, 10s);
    pending_done = Clock::now();
  });
  REQUIRE(s.agent->wait_for_log("dialing " + stuck_address, 5s));

  auto killed_at = Clock::now();
  s.agent->kill(SIGKILL);

  // Tunnel A ends: CLOSE_RSP or the end of the stream, after whatever was in flight.
  Tunnel::ReadStatus st;
  while ((st = t.read_for(&chunk, 5s)) == Tunnel::ReadStatus::Data) {
  }
  auto a_ended = Clock::now();
  CHECK(st == Tunnel::ReadStatus::Eof);
  stop = true;
  writer.join();
  dialer.join();

  CHECK_FALSE(pending.tunnel);
  INFO("pending dial error: " << pending.error << "; tunnel A end: " << t.end_reason());
  CHECK(pending.error.find("dial timeout") == std::string::npos);
  CHECK(ms_between(killed_at, pending_done) < 1000.0 * kSlowFactor);
  CHECK(ms_between(killed_at, a_ended) < 1000.0 * kSlowFactor);
  WARN("after SIGKILL of the agent: tunnel ended in "
       << ms_between(killed_at, a_ended) << " ms, pending dial failed in "
       << ms_between(killed_at, pending_done) << " ms (\"" << pending.error << "\")");
  t.close(2s);
  // The server itself is fine: with no agent left, dials fail fast instead of hanging.
  auto none = Tunnel::dial(s.channel, s.http.address(), 5s);
  CHECK_FALSE(none.tunnel);
  CHECK(none.error.find("No agent available") != std::string::npos);
}

TEST_CASE("e2e: after a server restart the agent reconnects within the sync cap", "[e2e]") {
  KONN_REQUIRE_DAEMONS();
  TunnelStack s;
  // reliability: proxy-agent | SIGKILL of the proxy-server, restarted later | retries backing off
  // reliability+: to the 1 s cap, reconnects within 1.5 s of the restart | warn "cannot connect to
  // reliability+: proxy-server ..." per attempt | agent; dials work after the reconnect
  SECTION("SIGKILL") { s.server.kill(); }
  SECTION("SIGTERM") {
    int status = s.server.stop();
    INFO("server log:\n" << s.server.process().log());
    CHECK(status == 0);
  }
  // Let the agent fail a few attempts, so its retry interval has grown to the cap
  // (100ms, 150ms, 225ms, ... 1s).
  bool backed_off = s.agent->wait_for_log("cannot connect to proxy-server", 10s, 7);
  INFO("agent log:\n" << s.agent->log());
  REQUIRE(backed_off);
  s.server.start();
  auto up = Clock::now();
  REQUIRE(s.server.wait_agent_connected("agent-1", 5s * kSlowFactor));
  double reconnect_ms = ms_between(up, Clock::now());
  // --sync-interval-cap=1s, plus jitter (10%) and one TLS handshake.
  CHECK(reconnect_ms < 1500.0 * kSlowFactor);
  WARN("agent reconnected " << reconnect_ms << " ms after the server was listening again");

  auto channel = s.server.new_channel();
  auto d = Tunnel::dial(channel, s.http.address(), 5s);
  REQUIRE(d.error.empty());
  auto r = http_get(*d.tunnel, s.http.address(), "/hello", 10s);
  CHECK(r.body == "hello through the tunnel\n");
  CHECK(d.tunnel->close(5s) == "");
}
