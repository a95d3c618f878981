// /metrics of the server and the agent: every scrape is valid Prometheus text (a strict parser,
// and promtool when installed), and the metrics move when their event happens.
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <thread>
#include <unistd.h>
#include <vector>

#include <asio.hpp>
#include <catch2/catch.hpp>

#include "core/tunnel/packet.h"
#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/ha/ha_test_util.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/integration/tunnel/fake_agent.h"
#include "tests/support/echo_server.h"
#include "tests/support/loopback.h"

using namespace konn::e2e;
using konn::testclient::Tunnel;
using konn::testsupport::eventually;

namespace {

const std::string kAgent = "konnectivity_network_proxy_agent_";

// promtool from $PATH (scripts/setup.sh puts it in /usr/local/bin); "" when absent.
std::string promtool() {
  const char* env = std::getenv("PATH");
  std::string path = std::string(env != nullptr ? env : "") + ":/usr/local/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    std::string dir =
        path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    std::string p = (dir.empty() ? "." : dir) + "/promtool";
    if (::access(p.c_str(), X_OK) == 0) return p;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return {};
}

// Every problem of one scrape: the strict parser's, then promtool's (parse errors only; its lint
// findings are about upstream's names, which konn keeps on purpose).
void check_scrape(uint16_t port, const konn::testsupport::TempDir& dir, const std::string& who) {
  auto r = http_get_local(port, "/metrics");
  REQUIRE(r.status == 200);
  auto parsed = parse_prometheus_text(r.body);
  INFO(who << " /metrics:\n" << r.body);
  CHECK(parsed.errors.empty());
  for (const auto& e : parsed.errors) UNSCOPED_INFO(e);
  CHECK(parsed.families.size() > 10);
  std::string tool = promtool();
  if (tool.empty()) {
    WARN("promtool not installed (scripts/setup.sh installs it): strict parser only");
    return;
  }
  std::string file = dir.file(who + ".metrics");
  std::ofstream(file) << r.body;
  konn::testsupport::ProcessOptions o;
  o.binary = tool;
  o.args = {"check", "metrics"};
  o.stdin_path = file;
  auto run = konn::testsupport::run_process(o, 30s);
  INFO("promtool: " << run.output);
  // Exit 1 and "error while linting: text format parsing error" mean the text did not parse;
  // exit 3 lists lint findings only (upstream's `dial_failure_count` counter has no `_total`).
  CHECK((run.exit_code == 0 || run.exit_code == 3));
  CHECK(run.output.find("error while linting") == std::string::npos);
}

}  // namespace

TEST_CASE("metrics: full scrapes parse as Prometheus text and the named metrics move",
          "[e2e][ha][metrics]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-ha"};
  konn::testsupport::EchoServer echo;
  FleetServer s(certs, "s1", {});
  s.start();
  FleetServer lonely(certs, "lonely", {});  // no agent ever: dials fail with no_agent
  lonely.start();
  FleetAgent a(dir, certs, "a1", s.agent_port(), {});
  REQUIRE(eventually([&] { return s.ready_agents() == 1 && a.servers() == 1; }, 20s));

  auto before = s.metrics();
  REQUIRE(before.errors.empty());
  CHECK(before.value(kServer + "grpc_connections", {{"service_method", "Connect"}}) == 1);
  CHECK(before.value(kServer + "ready_backend_connections").has_value());
  CHECK(a.metric(kAgent + "known_server_count") == 1);

  // A tunnel: dial, bytes both ways, then close.
  auto ch = s.channel();
  std::string payload(100000, 'x');
  auto t = echo_tunnel(ch, echo.address(), payload);
  auto during = s.metrics();
  CHECK(during.value(kServer + "grpc_connections", {{"service_method", "Proxy"}}) == 1);
  CHECK(during.value(kServer + "established_connections") == 1);
  CHECK(a.metric(kAgent + "open_endpoint_connections") == 1);
  t->close();
  CHECK(eventually([&] { return s.metric(kServer + "established_connections") == 0; }, 10s));
  auto after = s.metrics();
  REQUIRE(after.errors.empty());
  auto grew = [&](const std::string& name, const std::map<std::string, std::string>& labels,
                  double by) {
    double was = before.value(name, labels).value_or(0);
    double now = after.value(name, labels).value_or(0);
    INFO(name << " went from " << was << " to " << now);
    CHECK(now >= was + by);
  };
  grew(kServer + "stream_packets_total", {{"segment", "from_client"}, {"packet_type", "DIAL_REQ"}},
       1);
  grew(kServer + "stream_packets_total", {{"segment", "to_agent"}, {"packet_type", "DIAL_REQ"}}, 1);
  grew(kServer + "stream_packets_total", {{"segment", "from_agent"}, {"packet_type", "DIAL_RSP"}},
       1);
  grew(kServer + "stream_packets_total", {{"segment", "to_client"}, {"packet_type", "DATA"}}, 1);
  grew(kServer + "stream_packets_total", {{"segment", "from_client"}, {"packet_type", "CLOSE_REQ"}},
       1);
  grew(kServer + "dial_duration_seconds_count", {}, 1);
  // The tunnel's life, in upstream's buckets (1 s .. 24 h): it lived well under a second.
  grew(kServer + "connection_duration_seconds_count", {}, 1);
  grew(kServer + "connection_duration_seconds_bucket", {{"le", "1"}}, 1);
  // Every histogram has upstream's buckets, so copied dashboards and quantiles read the same.
  auto buckets = [&](const std::string& family) {
    std::vector<double> out;  // parsed: the text of 1e-06 depends on the serializer
    if (auto f = after.families.find(kServer + family); f != after.families.end()) {
      for (const auto& sample : f->second.samples) {
        if (auto le = sample.labels.find("le"); le != sample.labels.end()) {
          out.push_back(std::strtod(le->second.c_str(), nullptr));
        }
      }
    }
    return out;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> latency{1e-6, 1e-5, 1e-4, 0.005, 0.025, 0.1, 0.5, 2.5, 12.5, inf};
  CHECK(buckets("connection_duration_seconds") ==
        std::vector<double>{1, 5, 15, 30, 60, 300, 900, 1800, 3600, 14400, 43200, 86400, inf});
  CHECK(buckets("dial_duration_seconds") == latency);
  CHECK(buckets("frontend_write_duration_seconds") == latency);
  grew(kServer + "bytes_total", {{"direction", "to_agent"}}, 100000);
  grew(kServer + "bytes_total", {{"direction", "to_client"}}, 100000);
  CHECK(a.metric("konn_agent_bytes_total", {{"direction", "to_endpoint"}}) >= 100000);
  CHECK(a.metric("konn_agent_bytes_total", {{"direction", "from_endpoint"}}) >= 100000);
  CHECK(a.dials() == 1);
  // The agent counts what it receives (to_agent) and sends (from_agent) by packet type, as
  // upstream; its dial latency histogram has the successful dial.
  auto agent_packets = [&](const char* segment, const char* type) {
    return a.metric(kAgent + "stream_packets_total", {{"segment", segment}, {"packet_type", type}})
        .value_or(0);
  };
  CHECK(agent_packets("to_agent", "DIAL_REQ") == 1);
  CHECK(agent_packets("to_agent", "DATA") >= 1);
  CHECK(agent_packets("to_agent", "CLOSE_REQ") == 1);
  CHECK(agent_packets("from_agent", "DIAL_RSP") == 1);
  CHECK(agent_packets("from_agent", "DATA") >= 1);
  CHECK(agent_packets("from_agent", "CLOSE_RSP") == 1);
  CHECK(a.metric(kAgent + "dial_duration_seconds_count") == 1);
  CHECK(a.metric(kAgent + "dial_duration_seconds_bucket", {{"le", "30"}}) == 1);

  // A refused dial: the agent's endpoint_dial_failure_total{unknown}, the server's
  // dial_failure_count{error_response}.
  std::string closed = "127.0.0.1:" + std::to_string(konn::testsupport::free_tcp_port());
  CHECK_FALSE(Tunnel::dial(ch, closed, 10s).tunnel);
  CHECK(eventually(
      [&] {
        return a.metric(kAgent + "endpoint_dial_failure_total", {{"reason", "unknown"}}) == 1;
      },
      10s));
  CHECK(s.metric(kServer + "dial_failure_count", {{"reason", "error_response"}}) == 1);
  CHECK(a.metric(kAgent + "dial_duration_seconds_count") == 1);  // successful dials only
  // No agent at all.
  CHECK(Tunnel::dial(lonely.channel(), echo.address(), 10s).error.find("No agent available") !=
        std::string::npos);
  CHECK(lonely.metric(kServer + "dial_failure_count", {{"reason", "no_agent"}}) == 1);
  CHECK(lonely.metric(kServer + "ready_backends", {{"proxy_strategy", "default"}}) == 0);

  // konn's own families are there (they move in the data-path tests that stall a reader).
  auto last = s.metrics();
  CHECK(last.families.count(kServer + "tunnels_over_cap_total") == 1);
  CHECK(last.value(kServer + "reads_paused_total", {{"reason", "queue_full"}}) == 0);
  CHECK(last.value(kServer + "reads_paused_total", {{"reason", "no_credit"}}) == 0);
  CHECK(last.families.count(kServer + "culled_leases_count") == 1);
  auto agent_last = a.metrics();
  CHECK(agent_last.families.count("konn_agent_read_pauses_total") == 1);
  CHECK(agent_last.families.count("konn_agent_endpoint_queue_overflow_total") == 1);
  // Labelled families without a sample yet are not written (as upstream's Go client does):
  // lease_lists_total appears with the first list (the lease test checks it).
  CHECK(agent_last.families.count(kAgent + "lease_lists_total") == 0);

  // An agent going away is seen by the server, and its broken stream is a stream error (upstream:
  // a failed Recv on the agent stream, no packet).
  // None on the agent's stream so far. (A test client's stream may show one: a client that
  // cancels its call before the server finished it is counted from_client, as upstream does, and
  // under load that race goes either way.)
  {
    auto now = s.metrics();
    double agent_stream_errors = 0;
    std::string seen;
    if (auto f = now.families.find(kServer + "stream_errors_total"); f != now.families.end()) {
      for (const auto& sample : f->second.samples) {
        for (const auto& [k, v] : sample.labels) seen += k + "=" + v + " ";
        seen += "-> " + std::to_string(sample.value) + "; ";
        const std::string& segment =
            sample.labels.count("segment") ? sample.labels.at("segment") : "";
        if (segment == "from_agent" || segment == "to_agent") agent_stream_errors += sample.value;
      }
    }
    INFO("stream_errors_total: " << seen);
    CHECK(agent_stream_errors == 0);
  }
  a.process().kill(SIGKILL);
  CHECK(eventually(
      [&] {
        return s.metric(kServer + "grpc_connections", {{"service_method", "Connect"}}) == 0 &&
               s.ready_agents() == 0;
      },
      20s));
  CHECK(s.metric(kServer + "stream_errors_total",
                 {{"segment", "from_agent"}, {"code", "Canceled"}, {"packet_type", "Unknown"}}) ==
        1);

  check_scrape(s.health_port(), dir, "server");
  check_scrape(lonely.health_port(), dir, "lonely-server");
  FleetAgent b(dir, certs, "b1", s.agent_port(), {});
  REQUIRE(eventually([&] { return b.servers() == 1; }, 20s));
  check_scrape(b.health_port(), dir, "agent");

  // A server going away breaks the agent's stream: a receive error, by gRPC code.
  CHECK(b.metrics().families.count(kAgent + "stream_errors_total") == 0);
  s.kill();
  CHECK(eventually([&] { return b.servers() == 0; }, 20s));
  CHECK(b.metric(kAgent + "stream_errors_total",
                 {{"segment", "to_agent"}, {"code", "Unavailable"}, {"packet_type", "Unknown"}}) ==
        1);
  CHECK(b.metric(kAgent + "server_connection_failure_count", {{"direction", "from_server"}}) == 1);
}

namespace {

using konn::core::tunnel::make_data;
using konn::core::tunnel::make_dial_response;

// The fake agent answers the next DIAL_REQ with connectID `id`; returns the dial id.
int64_t accept_dial(FakeAgent& agent, int64_t id) {
  auto req = agent.next(DIAL_REQ, 10s);
  REQUIRE(req);
  int64_t random = req->dialrequest().random();
  REQUIRE(agent.send(make_dial_response(random, id)));
  return random;
}

// Sends DATA for `id` (256 KiB packets) until the server asks to close it or `limit` bytes went.
// Returns the bytes sent.
size_t flood(FakeAgent& agent, int64_t id, size_t limit) {
  const std::string chunk(256 * 1024, 'z');
  size_t sent = 0;
  auto closed = [id](const Packet& p) {
    return p.type() == CLOSE_REQ && p.closerequest().connectid() == id;
  };
  while (sent < limit && !agent.received(closed, 0ms)) {
    std::string bytes = chunk;
    if (!agent.send(make_data(id, std::move(bytes)))) break;
    sent += chunk.size();
  }
  return sent;
}

// A unix-socket CONNECT client (kube-apiserver's HTTPConnect egress) that reads only the answer's
// head, then nothing.
struct ConnectClient {
  asio::io_context ctx;
  asio::local::stream_protocol::socket socket{ctx};

  // Sends the CONNECT request and returns the status line.
  std::string connect(const std::string& uds, const std::string& target) {
    socket.connect(asio::local::stream_protocol::endpoint(uds));
    std::string req = "CONNECT " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    asio::write(socket, asio::buffer(req));
    std::string head;
    char c = 0;
    while (head.find("\r\n\r\n") == std::string::npos) {
      std::error_code ec;
      if (asio::read(socket, asio::buffer(&c, 1), ec) != 1) break;
      head.push_back(c);
    }
    return head.substr(0, head.find("\r\n"));
  }
};

}  // namespace

TEST_CASE("metrics: a tunnel whose client takes nothing is closed alone and the agent moves on",
          "[e2e][ha][metrics]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  // An upstream-like agent (no konn-flow-control): the server cannot slow one of its tunnels
  // alone, so it stops reading the agent's stream while 512 KiB (half of --xfr-channel-size=1)
  // wait for clients. A client that takes nothing for --stalled-client-timeout meanwhile has its
  // tunnel closed, and the agent's stream moves again at once.
  // reliability: proxy-server | gRPC client stops reading, upstream-like agent without flow control
  // reliability+: | agent stream paused; after --stalled-client-timeout that tunnel closed:
  // reliability+: `RESOURCE_EXHAUSTED`, CLOSE_REQ to the agent | warn "closing tunnel: the client
  // reliability+: took none of the ... bytes waiting for it" | the agent stream moves again and
  // reliability+: carries a new tunnel
  SECTION("gRPC frontend") {
    FleetServer s(certs, "cap-grpc", {"--xfr-channel-size=1", "--stalled-client-timeout=1s"});
    s.start();
    FakeAgent agent(s.agent_port(), certs, {});
    REQUIRE(agent.wait_connected(10s));
    REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 10s));
    CHECK(s.metric(kServer + "tunnels_over_cap_total") == 0);
    auto ch = s.channel();
    std::unique_ptr<Tunnel> stalled;
    std::thread dialer([&] { stalled = Tunnel::dial(ch, "10.1.2.3:80", 10s).tunnel; });
    accept_dial(agent, 1);
    dialer.join();
    REQUIRE(stalled);
    // The client reads nothing: its inbox and HTTP/2 windows fill, then the server's queue for
    // this tunnel, then the agent's stream stops being read (its sends block), until the tunnel
    // is closed and the stream moves again.
    const auto t0 = std::chrono::steady_clock::now();
    size_t sent = flood(agent, 1, 256 << 20);
    CHECK(sent < (256U << 20));
    auto close_req = agent.next(CLOSE_REQ, 10s);
    REQUIRE(close_req);
    CHECK(close_req->closerequest().connectid() == 1);
    CHECK(std::chrono::steady_clock::now() - t0 >= 1s);  // not before the client's bound
    CHECK(s.metric(kServer + "tunnels_over_cap_total") == 1);
    CHECK(s.metric(kServer + "reads_paused_total", {{"reason", "clients_behind"}}) >= 1);
    // Reading again (its inbox may be full, which stops its reader), the client finds the
    // tunnel ended with RESOURCE_EXHAUSTED.
    auto until = std::chrono::steady_clock::now() + 30s;
    std::string chunk;
    while (!stalled->ended() && std::chrono::steady_clock::now() < until) {
      stalled->read_for(&chunk, 1s);
    }
    CHECK(stalled->ended());
    CHECK(stalled->status().error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    // The stream still carries new tunnels.
    auto other = std::thread([&] { accept_dial(agent, 2); });
    auto d = Tunnel::dial(ch, "10.1.2.3:81", 10s);
    other.join();
    CHECK(d.tunnel);
    // The gauge moves on the server's own threads (the stalled tunnel's removal and the new
    // tunnel's DIAL_RSP race the client's view), so a scrape may lag by a moment.
    CHECK(eventually([&] { return s.metric(kServer + "established_connections") == 1; }, 10s));
  }
  // reliability: proxy-server | CONNECT client stops reading, agent without flow control | agent
  // reliability+: stream paused; after --stalled-client-timeout that tunnel closed, CLOSE_REQ to
  // reliability+: the agent | warn "closing tunnel: the client took none of the ... bytes waiting
  // reliability+: for it" | the agent stream; established_connections back to 0
  SECTION("HTTP CONNECT frontend") {
    FleetServer s(certs, "cap-connect",
                  {"--xfr-channel-size=1", "--mode=http-connect", "--stalled-client-timeout=1s"});
    s.start();
    FakeAgent agent(s.agent_port(), certs, {});
    REQUIRE(agent.wait_connected(10s));
    REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 10s));
    ConnectClient client;
    std::string status;
    std::thread connecting([&] { status = client.connect(s.uds_path(), "10.1.2.3:80"); });
    accept_dial(agent, 1);
    connecting.join();
    REQUIRE(status == "HTTP/1.1 200 Connection Established");
    size_t sent = flood(agent, 1, 256 << 20);
    CHECK(sent < (256U << 20));
    REQUIRE(agent.next(CLOSE_REQ, 10s));
    CHECK(s.metric(kServer + "tunnels_over_cap_total") == 1);
    CHECK(eventually([&] { return s.metric(kServer + "established_connections") == 0; }, 10s));
  }
}

// Upstream PR #896's gauges, with konn's meaning: a CONNECT tunnel whose queue towards its client
// holds its full mark (half the tunnel's cap here), and an agent stream (without konn's flow
// control) not read because its clients are behind. Both go back to 0 when the client leaves.
TEST_CASE(
    "metrics: full_frontend_write_queues and blocked_frontend_write_channels follow a "
    "stalled CONNECT client",
    "[e2e][ha][metrics]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  // --stalled-client-timeout=0: the stalled tunnel stays, so the gauges can be read while it is.
  FleetServer s(certs, "write-queues",
                {"--xfr-channel-size=4", "--mode=http-connect", "--stalled-client-timeout=0",
                 "--frontend-write-channel-size=10"});
  s.start();
  auto scrape = s.metrics();
  REQUIRE(scrape.errors.empty());
  for (const char* name : {"full_frontend_write_queues", "blocked_frontend_write_channels"}) {
    INFO(name);
    REQUIRE(scrape.families.count(kServer + name) == 1);
    CHECK(scrape.families.at(kServer + name).type == "gauge");
    CHECK(scrape.value(kServer + name) == 0);
  }
  FakeAgent agent(s.agent_port(), certs, {});
  REQUIRE(agent.wait_connected(10s));
  REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 10s));
  ConnectClient client;
  std::string status;
  std::thread connecting([&] { status = client.connect(s.uds_path(), "10.1.2.3:80"); });
  accept_dial(agent, 1);
  connecting.join();
  REQUIRE(status == "HTTP/1.1 200 Connection Established");
  // The client reads nothing; the agent sends until the server stops reading its stream (its
  // sends then block) or the server asks it to close.
  std::thread flooder([&] { flood(agent, 1, 256 << 20); });
  CHECK(eventually(
      [&] {
        return s.metric(kServer + "full_frontend_write_queues") == 1 &&
               s.metric(kServer + "blocked_frontend_write_channels") == 1;
      },
      20s));
  // The client leaves: the server closes the tunnel (CLOSE_REQ), reads the agent again, and
  // neither gauge counts it any more.
  client.socket.close();
  CHECK(eventually(
      [&] {
        return s.metric(kServer + "full_frontend_write_queues") == 0 &&
               s.metric(kServer + "blocked_frontend_write_channels") == 0;
      },
      20s));
  flooder.join();
  CHECK(s.metric(kServer + "tunnels_over_cap_total") == 0);
}

// reliability: proxy-server | gRPC client slower than its upstream-like agent (no flow control)
// reliability+: | the agent's stream paused while 4 MiB wait for clients, resumed below 2 MiB |
// reliability+: debug "agent stream paused" | every byte delivered, in order
TEST_CASE("metrics: a slow client of an agent without flow control gets every byte",
          "[e2e][ha][metrics]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  // The agent sends 48 MiB as fast as it can; the client reads slower. The server slows the
  // agent (its stream is not read while 4 MiB wait) instead of closing the tunnel.
  FleetServer s(certs, "slow-client", {"--stalled-client-timeout=5s"});
  s.start();
  FakeAgent agent(s.agent_port(), certs, {});
  REQUIRE(agent.wait_connected(10s));
  REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 10s));
  auto ch = s.channel();
  std::unique_ptr<Tunnel> t;
  std::thread dialer([&] { t = Tunnel::dial(ch, "10.1.2.3:80", 10s).tunnel; });
  accept_dial(agent, 1);
  dialer.join();
  REQUIRE(t);
  const size_t kTotal = 48 << 20;
  std::atomic<size_t> sent{0};
  std::thread sender([&] {
    size_t n = 0;
    for (uint32_t i = 0; n < kTotal; ++i) {
      std::string chunk(32 * 1024, static_cast<char>('a' + i % 26));
      if (!agent.send(make_data(1, std::move(chunk)))) break;
      n += 32 * 1024;
    }
    sent = n;
  });
  size_t got = 0;
  bool in_order = true;
  std::string buf;
  auto until = std::chrono::steady_clock::now() + 60s;
  while (got < kTotal && !t->ended() && std::chrono::steady_clock::now() < until) {
    buf.clear();
    if (t->read_for(&buf, 1s) != Tunnel::ReadStatus::Data) continue;
    for (size_t i = 0; i < buf.size(); ++i) {
      if (buf[i] != static_cast<char>('a' + ((got + i) / (32 * 1024)) % 26)) in_order = false;
    }
    got += buf.size();
    std::this_thread::sleep_for(2ms);  // slower than the agent
  }
  sender.join();
  CHECK(sent == kTotal);
  CHECK(got == kTotal);
  CHECK(in_order);
  CHECK_FALSE(agent.received(
      [](const Packet& p) { return p.type() == CLOSE_REQ; }, 0ms));
  CHECK(s.metric(kServer + "tunnels_over_cap_total") == 0);
  CHECK(s.metric(kServer + "reads_paused_total", {{"reason", "clients_behind"}}) >= 1);
}

TEST_CASE("metrics: reads paused by backpressure are counted by reason", "[e2e][ha][metrics]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  auto paused = [](const FleetServer& s, const char* reason) {
    return s.metric(kServer + "reads_paused_total", {{"reason", reason}}).value_or(-1);
  };
  SECTION("queue_full: the agent stream stops taking packets") {
    FleetServer s(certs, "pause-queue", {});
    s.start();
    FakeAgent agent(s.agent_port(), certs, {});
    REQUIRE(agent.wait_connected(10s));
    REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 10s));
    auto ch = s.channel();
    std::unique_ptr<Tunnel> t;
    std::thread dialer([&] { t = Tunnel::dial(ch, "10.1.2.3:80", 10s).tunnel; });
    accept_dial(agent, 1);
    dialer.join();
    REQUIRE(t);
    agent.pause_reading();
    // 32 MiB towards an agent that reads nothing: past the HTTP/2 windows, the backend's queue
    // holds more than 4 MiB of this tunnel and the frontend stops reading its client.
    const size_t kTotal = 32 << 20;
    std::atomic<bool> written{false};
    std::thread writer([&] { written = t->write(std::string(kTotal, 'q')); });
    CHECK(eventually([&] { return paused(s, "queue_full") >= 1; }, 20s));
    CHECK_FALSE(written);
    CHECK(paused(s, "no_credit") == 0);
    // Once the agent reads again everything arrives, in order and complete.
    agent.resume_reading();
    writer.join();
    CHECK(written);
    size_t got = 0;
    while (got < kTotal) {
      auto p = agent.next(DATA, 10s);
      REQUIRE(p);
      got += p->data().data().size();
    }
    CHECK(got == kTotal);
    CHECK(s.metric(kServer + "bytes_total", {{"direction", "to_agent"}}) == kTotal);
  }
  SECTION("queue_full: a CONNECT client sends faster than the agent stream takes") {
    FleetServer s(certs, "pause-connect", {"--mode=http-connect"});
    s.start();
    FakeAgent agent(s.agent_port(), certs, {});
    REQUIRE(agent.wait_connected(10s));
    REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 10s));
    ConnectClient client;
    std::string status;
    std::thread connecting([&] { status = client.connect(s.uds_path(), "10.1.2.3:80"); });
    accept_dial(agent, 1);
    connecting.join();
    REQUIRE(status == "HTTP/1.1 200 Connection Established");
    agent.pause_reading();
    const size_t kTotal = 32 << 20;
    std::thread writer([&] {
      std::error_code ec;
      asio::write(client.socket, asio::buffer(std::string(kTotal, 'q')), ec);
    });
    // At least once, not exactly once: while gRPC still moves the queue into the HTTP/2 windows
    // the queue can fall under its resume mark and fill again, a second pause (seen under load).
    CHECK(eventually([&] { return paused(s, "queue_full") >= 1; }, 20s));
    CHECK(paused(s, "no_credit") == 0);
    agent.resume_reading();
    writer.join();
    size_t got = 0;
    while (got < kTotal) {
      auto p = agent.next(DATA, 10s);
      REQUIRE(p);
      got += p->data().data().size();
    }
    CHECK(got == kTotal);
    CHECK(s.metric(kServer + "bytes_total", {{"direction", "to_agent"}}) == kTotal);
    CHECK(paused(s, "no_credit") == 0);
  }
  SECTION("no_credit: konn flow control, the destination stops reading") {
    konn::testsupport::TempDir dir{"konn-ha"};
    FleetServer s(certs, "pause-credit", {});
    s.start();
    FleetAgent a(dir, certs, "a1", s.agent_port(), {});
    REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));
    // A destination that never accepts: the kernel completes the connection and buffers what
    // fits, then the agent cannot write and returns no more credit.
    asio::io_context ctx;
    asio::ip::tcp::acceptor sink(ctx, {asio::ip::make_address("127.0.0.1"), 0});
    std::string address = "127.0.0.1:" + std::to_string(sink.local_endpoint().port());
    auto d = Tunnel::dial(s.channel(), address, 10s);
    REQUIRE(d.tunnel);
    std::thread writer([&] { d.tunnel->write(std::string(96 << 20, 'c')); });
    // (queue_full may also count: a fast sender passes 4 MiB in the agent stream's queue.)
    CHECK(eventually([&] { return paused(s, "no_credit") >= 1; }, 30s));
    d.tunnel->close(5s);
    writer.join();
  }
}

// reliability: proxy-server | CONNECT clients reset (SO_LINGER 0) mid-download | tunnels finished |
// reliability+: debug "http-connect tunnel closed: ..." | every gauge back to 0 on server and agent
TEST_CASE("metrics: http-connect gauges return to 0 after clients reset mid-download",
          "[e2e][metrics]") {
  // A client that resets while the agent still sends DATA: the agent's CLOSE_RSP can arrive
  // while a write to the dead client is in flight, and that write's failure must still finish
  // the tunnel (established_connections was left counting it; found by the soak test).
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-ha"};
  FleetServer s(certs, "hc", {"--mode=http-connect"});
  s.start();
  FleetAgent a(dir, certs, "a1", s.agent_port(), {});
  REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));

  // The destination: sends until the connection fails.
  asio::io_context io;
  asio::ip::tcp::acceptor hose(io, {asio::ip::make_address("127.0.0.1"), 0});
  const std::string target = "127.0.0.1:" + std::to_string(hose.local_endpoint().port());
  constexpr int kTunnels = 150;
  std::vector<std::thread> senders;
  std::atomic<bool> stop{false};
  std::thread acceptor([&] {
    for (;;) {
      std::error_code ec;
      auto peer = std::make_shared<asio::ip::tcp::socket>(hose.accept(ec));
      if (ec || stop) return;
      senders.emplace_back([peer] {
        std::string chunk(64 * 1024, 'h');
        std::error_code wec;
        while (!wec) asio::write(*peer, asio::buffer(chunk), wec);
      });
    }
  });
  for (int i = 0; i < kTunnels; ++i) {
    asio::local::stream_protocol::socket c(io);
    c.connect(asio::local::stream_protocol::endpoint(s.uds_path()));
    const std::string req = "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n";
    asio::write(c, asio::buffer(req));
    std::string got;
    char buf[16384];
    while (got.find("\r\n\r\n") == std::string::npos || got.size() < 100000) {
      got.append(buf, c.read_some(asio::buffer(buf)));
    }
    c.set_option(asio::socket_base::linger(true, 0));
    c.close();  // bytes unread: the server's next read is ECONNRESET
    if (got.rfind("HTTP/1.1 200", 0) != 0) {
      FAIL_CHECK("tunnel " << i << " answered " << got.substr(0, got.find("\r\n")));
      break;
    }
  }
  stop = true;
  asio::ip::tcp::socket wake(io);
  wake.connect(hose.local_endpoint());
  acceptor.join();
  for (auto& t : senders) t.join();
  auto gauge = [&](const std::string& name) { return s.metric(kServer + name).value_or(-1); };
  CHECK(eventually([&] { return gauge("http_connections") == 0; }, 10s));
  CHECK(eventually([&] { return gauge("established_connections") == 0; }, 10s));
  CHECK(gauge("established_connections") == 0);
  CHECK(gauge("pending_backend_dials") == 0);
  CHECK(eventually([&] { return a.metric(kAgent + "open_endpoint_connections") == 0.0; }, 10s));
}
