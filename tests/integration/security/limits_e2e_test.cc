// Limits (issue 8 item 4), each hit through real sockets: the peer gets a clear answer
// (RESOURCE_EXHAUSTED, a DIAL_RSP error, HTTP 503/431, a closed connection), the limit is counted
// in limits_hit_total{limit} and logged, and the daemon goes on serving.
#include <sys/socket.h>
#include <thread>

#include <asio.hpp>
#include <catch2/catch.hpp>
#include <grpcpp/client_context.h>

#include "core/tunnel/packet.h"
#include "test-client/tunnel.h"
#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/security/security_util.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/integration/tunnel/fake_agent.h"
#include "tests/support/echo_server.h"
#include "tests/support/loopback.h"

using namespace konn::e2e;
using konn::core::tunnel::make_dial_request;
using konn::core::tunnel::make_dial_response;
using konn::testclient::Tunnel;
using konn::testsupport::eventually;

namespace {

double limit_hits(const FleetServer& s, const std::string& limit) {
  return s.metric(kServer + "limits_hit_total", {{"limit", limit}}).value_or(-1);
}

// An echo round trip through a fresh tunnel: the server (and agent) still serve.
void still_serving(const FleetServer& s, const std::string& echo) {
  auto d = Tunnel::dial(s.channel(), echo, 10s);
  INFO("dial error: " << d.error);
  REQUIRE(d.tunnel);
  REQUIRE(d.tunnel->write("still here"));
  std::string got;
  while (got.size() < 10) {
    std::string chunk;
    REQUIRE(d.tunnel->read_for(&chunk, 10s) == Tunnel::ReadStatus::Data);
    got += chunk;
  }
  CHECK(got == "still here");
  d.tunnel->close(5s);
}

// A dial in its own thread (Tunnel::dial blocks until the answer).
struct AsyncDial {
  std::thread thread;
  Tunnel::DialResult result;
  AsyncDial(const std::shared_ptr<grpc::Channel>& ch, const std::string& address,
            std::chrono::milliseconds timeout) {
    thread =
        std::thread([this, ch, address, timeout] { result = Tunnel::dial(ch, address, timeout); });
  }
  ~AsyncDial() {
    if (thread.joinable()) thread.join();
  }
  Tunnel::DialResult& get() {
    if (thread.joinable()) thread.join();
    return result;
  }
};

}  // namespace

TEST_CASE("limits: --max-frontend-streams refuses a gRPC stream and a CONNECT connection over it",
          "[e2e][limits]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-limits"};
  konn::testsupport::EchoServer echo;
  // reliability: proxy-server | gRPC frontend stream over --max-frontend-streams |
  // reliability+: `RESOURCE_EXHAUSTED` "too many frontend streams (limit 2,
  // reliability+: --max-frontend-streams)" | warn "frontend from ... refused: 2 frontend streams
  // reliability+: open (--max-frontend-streams)" | open tunnels; a slot comes back when one ends
  SECTION("gRPC frontend: RESOURCE_EXHAUSTED") {
    FleetServer s(certs, "streams", {"--max-frontend-streams=2"});
    s.start();
    FleetAgent a(dir, certs, "a1", s.agent_port(), {});
    REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));
    CHECK(limit_hits(s, "frontend_streams") == 0);
    auto ch = s.channel();
    auto t1 = Tunnel::dial(ch, echo.address(), 10s);
    auto t2 = Tunnel::dial(ch, echo.address(), 10s);
    REQUIRE(t1.tunnel);
    REQUIRE(t2.tunnel);
    auto t3 = Tunnel::dial(ch, echo.address(), 10s);
    CHECK_FALSE(t3.tunnel);
    INFO("third dial: " << t3.error);
    CHECK(t3.error.find("too many frontend streams (limit 2, --max-frontend-streams)") !=
          std::string::npos);
    CHECK(limit_hits(s, "frontend_streams") == 1);
    CHECK(s.process().count_in_log("refused: 2 frontend streams open (--max-frontend-streams)") ==
          1);
    // A slot comes back when a tunnel ends.
    t1.tunnel->close(5s);
    CHECK(eventually([&] { return Tunnel::dial(ch, echo.address(), 10s).tunnel != nullptr; }, 10s));
    t2.tunnel->close(5s);
    // The server frees a closed tunnel's slot after the client's close returns, and the tunnel
    // dialled above is still being torn down: wait until a slot is free before the round trip.
    CHECK(eventually([&] { return Tunnel::dial(ch, echo.address(), 10s).tunnel != nullptr; }, 10s));
    still_serving(s, echo.address());
  }
  // reliability: proxy-server | CONNECT connection over --max-frontend-streams | `HTTP/1.1 503`
  // reliability+: "too many frontend connections ...", before any request | warn "frontend from ...
  // reliability+: refused: 1 frontend streams open (--max-frontend-streams)" | the open tunnel; a
  // reliability+: slot comes back when it ends
  SECTION("CONNECT frontend: HTTP 503") {
    FleetServer s(certs, "conns", {"--mode=http-connect", "--max-frontend-streams=1"});
    s.start();
    FleetAgent a(dir, certs, "a1", s.agent_port(), {});
    REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));
    UnixConnectClient first;
    REQUIRE(first.open(s.uds_path()));
    CHECK(connect_status(first, echo.address()) == "HTTP/1.1 200 Connection Established");
    UnixConnectClient second;
    REQUIRE(second.open(s.uds_path()));
    std::string answer = second.read_to_end(10s);  // answered before any request
    CHECK(answer.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0) == 0);
    CHECK(answer.find("too many frontend connections (limit 1, --max-frontend-streams)") !=
          std::string::npos);
    CHECK(limit_hits(s, "frontend_streams") == 1);
    first.socket().close();
    CHECK(eventually(
        [&] {
          UnixConnectClient c;
          return c.open(s.uds_path()) &&
                 connect_status(c, echo.address()) == "HTTP/1.1 200 Connection Established";
        },
        10s));
  }
}

// reliability: proxy-server | dial over --max-pending-dials-per-agent or --max-pending-dials |
// reliability+: DIAL_RSP error "too many pending dials [to agent agent-a] (limit ...)" | warn
// reliability+: "[D... A...] dial refused: too many pending dials ..." | pending dials complete,
// reliability+: then new dials are admitted
TEST_CASE("limits: pending dials, in all and per agent, get a DIAL_RSP error or HTTP 503",
          "[e2e][limits]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  // Two agents that never answer: dials to 10.9.9.1 go to the first, to 10.9.9.2 to the
  // second (destHost), and stay pending.
  FleetServer s(
      certs, "pending",
      {"--proxy-strategies=destHost", "--max-pending-dials=3", "--max-pending-dials-per-agent=2"});
  s.start();
  FakeAgent a(s.agent_port(), certs, {"agent-a", "host=10.9.9.1", {}, "", ""});
  FakeAgent b(s.agent_port(), certs, {"agent-b", "host=10.9.9.2", {}, "", ""});
  REQUIRE(a.wait_connected(10s));
  REQUIRE(b.wait_connected(10s));
  REQUIRE(eventually(
      [&] {
        return s.metric(kServer + "ready_backends", {{"proxy_strategy", "destHost"}}) == 2;
      },
      10s));
  auto ch = s.channel();
  AsyncDial a1(ch, "10.9.9.1:80", 30s);
  AsyncDial a2(ch, "10.9.9.1:81", 30s);
  REQUIRE(eventually([&] { return s.metric(kServer + "pending_backend_dials") == 2; }, 10s));
  // A third dial to the same agent: over its 2.
  auto refused = Tunnel::dial(ch, "10.9.9.1:82", 10s);
  CHECK_FALSE(refused.tunnel);
  CHECK(refused.error.find("too many pending dials to agent agent-a (limit 2, "
                           "--max-pending-dials-per-agent)") != std::string::npos);
  CHECK(limit_hits(s, "pending_dials_per_agent") == 1);
  // The other agent still takes one; then the server's 3 are reached.
  AsyncDial b1(ch, "10.9.9.2:80", 30s);
  REQUIRE(eventually([&] { return s.metric(kServer + "pending_backend_dials") == 3; }, 10s));
  auto over = Tunnel::dial(ch, "10.9.9.2:81", 10s);
  CHECK(over.error.find("too many pending dials (limit 3, --max-pending-dials)") !=
        std::string::npos);
  CHECK(limit_hits(s, "pending_dials") == 1);
  CHECK(s.process().count_in_log("dial refused: too many pending dials") == 2);
  // The agents answer: everything pending completes, and dials are admitted again.
  for (auto* agent : {&a, &a, &b}) {
    auto req = agent->next(DIAL_REQ, 10s);
    REQUIRE(req);
    REQUIRE(agent->send(make_dial_response(req->dialrequest().random(), 0, "refused by test")));
  }
  CHECK(a1.get().error == "refused by test");
  CHECK(a2.get().error == "refused by test");
  CHECK(b1.get().error == "refused by test");
  CHECK(s.metric(kServer + "pending_backend_dials") == 0);
  AsyncDial again(ch, "10.9.9.1:80", 30s);
  auto req = a.next(DIAL_REQ, 10s);
  REQUIRE(req);
  REQUIRE(a.send(make_dial_response(req->dialrequest().random(), 7)));
  CHECK(again.get().tunnel);
  CHECK(s.process().running());
}

// reliability: proxy-server | dial to an agent carrying --max-tunnels-per-agent tunnels | DIAL_RSP
// reliability+: error "agent ... carries too many tunnels (limit 2, ...)", never sent to the agent
// reliability+: | warn "[D... A...] dial refused: agent ... carries too many tunnels ..." | its 2
// reliability+: tunnels
TEST_CASE("limits: --max-tunnels-per-agent refuses dials to a full agent stream", "[e2e][limits]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  FleetServer s(certs, "tunnels", {"--max-tunnels-per-agent=2"});
  s.start();
  FakeAgent a(s.agent_port(), certs, {});
  REQUIRE(a.wait_connected(10s));
  REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 10s));
  auto ch = s.channel();
  std::vector<std::unique_ptr<Tunnel>> open;
  for (int64_t id = 1; id <= 2; ++id) {
    AsyncDial d(ch, "10.1.1.1:80", 10s);
    auto req = a.next(DIAL_REQ, 10s);
    REQUIRE(req);
    REQUIRE(a.send(make_dial_response(req->dialrequest().random(), id)));
    REQUIRE(d.get().tunnel);
    open.push_back(std::move(d.get().tunnel));
  }
  auto third = Tunnel::dial(ch, "10.1.1.1:80", 10s);
  CHECK_FALSE(third.tunnel);
  CHECK(third.error.find("carries too many tunnels (limit 2, --max-tunnels-per-agent)") !=
        std::string::npos);
  CHECK(limit_hits(s, "tunnels_per_agent") == 1);
  CHECK_FALSE(a.next(DIAL_REQ, 500ms));  // never reached the agent
  CHECK(s.metric(kServer + "established_connections") == 2);
}

// reliability: proxy-server | CONNECT head over --http-connect-max-header-bytes, or unfinished at
// reliability+: --http-connect-header-timeout | `HTTP/1.1 431`, or closed without an answer | info
// reliability+: "http-connect client ...: bad request: ..." or "... no complete request head in 1s;
// reliability+: closing" | server (still running)
TEST_CASE("limits: CONNECT request heads: size (431) and time", "[e2e][limits]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  FleetServer s(certs, "heads",
                {"--mode=http-connect", "--http-connect-max-header-bytes=2048",
                 "--http-connect-header-timeout=1s"});
  s.start();
  {
    UnixConnectClient c;
    REQUIRE(c.open(s.uds_path()));
    c.send("CONNECT 10.0.0.1:80 HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(4096, 'p') +
           "\r\n\r\n");
    std::string answer = c.read_to_end(10s);
    CHECK(answer.rfind("HTTP/1.1 431 ", 0) == 0);
    CHECK(limit_hits(s, "connect_header_size") == 1);
  }
  {
    UnixConnectClient c;
    REQUIRE(c.open(s.uds_path()));
    c.send("CONNECT 10.0.0.1:80 HTTP/1.1\r\nHost:");  // and nothing more
    auto t0 = std::chrono::steady_clock::now();
    CHECK(c.closed_within(10s));
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    CHECK(limit_hits(s, "connect_header_timeout") == 1);
  }
  CHECK(s.process().running());
}

// reliability: proxy-server | TCP connection that never starts TLS (agent port, CONNECT TLS
// reliability+: frontend) | closed within 8 s | CONNECT: info "http-connect client ...: no TLS
// reliability+: handshake within 1s (--tls-handshake-timeout)"; agent port: info "agent ADDR: no
// reliability+: handshake within 1000 ms, closed"; both counted in limits_hit_total |
// reliability+: server (still running)
TEST_CASE("limits: TLS handshakes are bounded by --tls-handshake-timeout", "[e2e][limits]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  FleetServer s(certs, "handshake", {"--mode=http-connect", "--tls-handshake-timeout=1s"});
  uint16_t frontend = s.use_tcp_frontend();
  s.start();
  // A client that connects and never starts TLS is dropped, on the agent port (gRPC) and on the
  // CONNECT frontend.
  for (uint16_t port : {s.agent_port(), frontend}) {
    INFO("port " << port);
    asio::io_context ctx;
    asio::ip::tcp::socket sock(ctx);
    sock.connect({asio::ip::make_address("127.0.0.1"), port});
    auto t0 = std::chrono::steady_clock::now();
    char buf[64];
    std::error_code ec;
    sock.read_some(asio::buffer(buf), ec);  // blocks until the server closes
    CHECK(ec);
    CHECK(std::chrono::steady_clock::now() - t0 < 8s);
  }
  CHECK(limit_hits(s, "handshake_timeout") == 2);  // the agent port's and the CONNECT one
  CHECK(s.process().count_in_log("no handshake within 1000 ms, closed") == 1);
  CHECK(s.process().running());
}

// reliability: proxy-server | gRPC frontend stream that sends no DIAL_REQ | `DEADLINE_EXCEEDED` "no
// reliability+: DIAL_REQ within 1s" | info "frontend stream from ... closed: no DIAL_REQ within 1s
// reliability+: (--dial-request-timeout)" | server; its Proxy stream gauge back to 0
TEST_CASE("limits: a gRPC frontend stream that sends no DIAL_REQ is finished", "[e2e][limits]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  FleetServer s(certs, "idle", {"--dial-request-timeout=1s"});
  s.start();
  auto stub = ProxyService::NewStub(s.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 20s);
  auto stream = stub->Proxy(&ctx);
  Packet p;
  auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(stream->Read(&p));
  grpc::Status st = stream->Finish();
  CHECK(st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(st.error_message() == "no DIAL_REQ within 1s");
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(limit_hits(s, "dial_request_timeout") == 1);
  CHECK(eventually(
      [&] {
        return s.metric(kServer + "grpc_connections", {{"service_method", "Proxy"}}) == 0;
      },
      10s));
}

// reliability: proxy-agent | dial over --max-endpoint-connections | DIAL_RSP error "too many
// reliability+: endpoint connections (limit 2, ...)", `HTTP/1.1 503` at the CONNECT frontend | warn
// reliability+: "[D...] dial to ... refused: 2 endpoint connections open
// reliability+: (--max-endpoint-connections)" | agent; a dial succeeds once a connection closes
TEST_CASE("limits: the agent's --max-endpoint-connections refuses further dials", "[e2e][limits]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-limits"};
  konn::testsupport::EchoServer echo;
  FleetServer s(certs, "endpoints", {"--mode=http-connect"});
  s.start();
  FleetAgent a(dir, certs, "a1", s.agent_port(), {"--max-endpoint-connections=2"});
  REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));
  UnixConnectClient c1;
  UnixConnectClient c2;
  REQUIRE(c1.open(s.uds_path()));
  REQUIRE(c2.open(s.uds_path()));
  CHECK(connect_status(c1, echo.address()) == "HTTP/1.1 200 Connection Established");
  CHECK(connect_status(c2, echo.address()) == "HTTP/1.1 200 Connection Established");
  UnixConnectClient c3;
  REQUIRE(c3.open(s.uds_path()));
  // The agent's DIAL_RSP error is mapped to 503, as an agent out of files is.
  CHECK(connect_status(c3, echo.address()) == "HTTP/1.1 503 Service Unavailable");
  CHECK(c3.read_to_end(5s).find("too many endpoint connections (limit 2, "
                                "--max-endpoint-connections)") != std::string::npos);
  CHECK(a.metric("konn_agent_limits_hit_total", {{"limit", "endpoint_connections"}}) == 1);
  CHECK(a.process().count_in_log("refused: 2 endpoint connections open") == 1);
  // Closing one makes room again.
  c1.socket().close();
  CHECK(eventually(
      [&] {
        UnixConnectClient c;
        return c.open(s.uds_path()) &&
               connect_status(c, echo.address()) == "HTTP/1.1 200 Connection Established";
      },
      10s));
  CHECK(a.process().running());
}

// reliability: proxy-server | agent answers a second dial with a connectID an open tunnel of its
// reliability+: stream holds | that dial refused: DIAL_RSP error "... already in use on its
// reliability+: stream", no CLOSE_REQ to the agent | warn "DIAL_RSP reuses connection id ...;
// reliability+: dial refused" | the first tunnel carries on and ends with the agent's stream
TEST_CASE("bad input: an agent reusing an open connectID has that dial refused",
          "[e2e][bad-input]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  FleetServer s(certs, "dup-id", {});
  s.start();
  auto a = std::make_unique<FakeAgent>(s.agent_port(), certs, FakeAgent::Options{});
  REQUIRE(a->wait_connected(10s));
  REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 10s));
  auto ch = s.channel();
  AsyncDial first(ch, "10.1.1.1:80", 10s);
  auto req = a->next(DIAL_REQ, 10s);
  REQUIRE(req);
  REQUIRE(a->send(make_dial_response(req->dialrequest().random(), 7)));
  REQUIRE(first.get().tunnel);
  auto& tunnel = *first.get().tunnel;

  AsyncDial second(ch, "10.1.1.1:81", 10s);
  req = a->next(DIAL_REQ, 10s);
  REQUIRE(req);
  REQUIRE(a->send(make_dial_response(req->dialrequest().random(), 7)));
  CHECK_FALSE(second.get().tunnel);
  CHECK(second.get().error.find("connection id 7, already in use on its stream") !=
        std::string::npos);
  CHECK_FALSE(a->next(CLOSE_REQ, 300ms));  // id 7 is the first tunnel's
  CHECK(s.metric(kServer + "established_connections") == 1);

  // The first tunnel still has its id: the agent's DATA for 7 reaches it.
  REQUIRE(a->send(konn::core::tunnel::make_data(7, std::string("to the first"))));
  std::string got;
  while (got.size() < 12) {
    std::string chunk;
    REQUIRE(tunnel.read_for(&chunk, 10s) == Tunnel::ReadStatus::Data);
    got += chunk;
  }
  CHECK(got == "to the first");
  // And the agent's stream ending closes it at once, not after a CLOSE_RSP wait (10 s).
  a.reset();
  CHECK(eventually([&] { return s.metric(kServer + "established_connections") == 0; }, 3s));
}

// reliability: proxy-server | agent that never answers the CLOSE_REQ of a CONNECT tunnel the
// reliability+: client closed | the client's connection closed after 10 s | debug "http-connect
// reliability+: tunnel closed: agent did not answer the close request" | server, agent stream
TEST_CASE("limits: a CONNECT tunnel whose agent never answers CLOSE_REQ is closed after 10 s",
          "[e2e][limits]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  FleetServer s(certs, "close-wait", {"--mode=http-connect"});
  s.start();
  FakeAgent a(s.agent_port(), certs, {});  // no konn-half-close: the client's EOF closes
  REQUIRE(a.wait_connected(10s));
  REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 10s));
  UnixConnectClient c;
  REQUIRE(c.open(s.uds_path()));
  REQUIRE(c.send("CONNECT 10.1.1.1:80 HTTP/1.1\r\nHost: 10.1.1.1:80\r\n\r\n"));
  auto req = a.next(DIAL_REQ, 10s);
  REQUIRE(req);
  REQUIRE(a.send(make_dial_response(req->dialrequest().random(), 9)));
  CHECK(c.read_head(10s).rfind("HTTP/1.1 200", 0) == 0);
  REQUIRE(eventually([&] { return s.metric(kServer + "established_connections") == 1; }, 10s));

  c.socket().shutdown(asio::socket_base::shutdown_send);  // the client's EOF, and no answer
  auto close_req = a.next(CLOSE_REQ, 10s);
  REQUIRE(close_req);
  CHECK(close_req->closerequest().connectid() == 9);
  auto asked = std::chrono::steady_clock::now();
  CHECK(c.closed_within(20s));
  auto waited = std::chrono::steady_clock::now() - asked;
  CHECK(waited > 9s);
  CHECK(waited < 15s);
  CHECK(eventually([&] { return s.metric(kServer + "established_connections") == 0; }, 3s));
  // The agent stream was not blamed: the next CONNECT is dialled on it.
  UnixConnectClient next;
  REQUIRE(next.open(s.uds_path()));
  REQUIRE(next.send("CONNECT 10.1.1.1:81 HTTP/1.1\r\nHost: 10.1.1.1:81\r\n\r\n"));
  CHECK(a.next(DIAL_REQ, 10s));
  CHECK(s.process().running());
}
