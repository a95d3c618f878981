// Mixed fleets, as during a migration between upstream and konn: konn's proxy-server with agents
// that behave as upstream's Go agent (tests/go/upstream-agent: DRAIN on SIGTERM, servercount,
// lease counting), and, when KONN_UPSTREAM_BIN names upstream's v0.30.4 binaries (`server`,
// `agent`; bench/build-upstream.sh), konn's server with upstream's agents and upstream's server
// with konn's agents. Real processes and sockets only.

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "test-client/channel.h"
#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/ha/ha_test_util.h"
#include "tests/support/echo_server.h"
#include "tests/support/fake_apiserver.h"
#include "tests/support/loopback.h"
#include "tests/support/process_runner.h"
#include "tests/support/prom_text.h"
#include "tests/support/tcp_balancer.h"

using namespace konn::e2e;
using konn::testclient::Tunnel;
using konn::testsupport::eventually;
using konn::testsupport::Process;
using konn::testsupport::ProcessOptions;
using konn::testsupport::TcpBalancer;

namespace {

// Fails (never skips) when a binary is missing: the default build target builds all of them.
void require_binaries(const std::vector<std::string>& names) {
  for (const auto& n : names) {
    if (!Process::bin_exists(n)) {
      FAIL(n << " not built in " << konn::testsupport::bin_dir()
             << " (build the default target; the Go peers need scripts/setup.sh's packages)");
    }
  }
}

// tests/go/upstream-agent towards 127.0.0.1:<port>, id `id`, connect loop every 100 ms.
std::unique_ptr<Process> upstream_like_agent(const konn::testsupport::TempDir& dir,
                                             const konn::testsupport::TestCerts& certs,
                                             const std::string& id, uint16_t port,
                                             std::vector<std::string> extra = {}) {
  ProcessOptions o;
  o.binary = "upstream-agent";
  o.log_path = dir.file("upstream-agent-" + id + ".log");
  o.args = {"--addr=127.0.0.1:" + std::to_string(port),
            "--ca=" + certs.ca_crt,
            "--cert=" + certs.agent_crt,
            "--key=" + certs.agent_key,
            "--agent-id=" + id,
            "--sync-interval=100ms"};
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(std::move(o));
}

// Dials the upstream-like agent `agent` answered so far ("dial <address> connectID=").
int served(const Process& agent, const std::string& address) {
  return agent.count_in_log("dial " + address + " connectID=");
}

// Two started konn servers, s1 and s2, with the same extra flags.
std::vector<std::unique_ptr<FleetServer>> two_servers(const konn::testsupport::TestCerts& certs,
                                                      const std::vector<std::string>& args) {
  std::vector<std::unique_ptr<FleetServer>> servers;
  for (const char* id : {"s1", "s2"}) {
    servers.push_back(std::make_unique<FleetServer>(certs, id, args));
    servers.back()->start();
  }
  return servers;
}

std::vector<uint16_t> agent_ports(const std::vector<std::unique_ptr<FleetServer>>& servers) {
  std::vector<uint16_t> ports;
  for (const auto& s : servers) ports.push_back(s->agent_port());
  return ports;
}

// The directory of upstream's binaries, or empty (then the caller returns after a WARN).
std::string upstream_bin() {
  const char* env = std::getenv("KONN_UPSTREAM_BIN");
  if (env == nullptr || *env == '\0') {
    WARN("KONN_UPSTREAM_BIN not set: mixed fleets with upstream's binaries not checked");
    return {};
  }
  std::string dir = env;
  REQUIRE(::access((dir + "/server").c_str(), X_OK) == 0);
  REQUIRE(::access((dir + "/agent").c_str(), X_OK) == 0);
  return dir;
}

// A series of upstream's /metrics at `port` (0 when absent or unreadable).
double upstream_metric(uint16_t port, const std::string& series) {
  auto r = http_get_local(port, "/metrics");
  if (r.status != 200) return 0;
  auto parsed = konn::testsupport::parse_prometheus_text(r.body);
  auto v = parsed.value(series, {});
  return v ? *v : 0;
}

// Upstream's proxy-server (gRPC frontend on a unix socket), --server-id=<id>.
struct UpstreamServer {
  UpstreamServer(const std::string& bin, const konn::testsupport::TempDir& dir,
                 const konn::testsupport::TestCerts& certs, const std::string& server_id,
                 int server_count)
      : id(server_id),
        sock(dir.file("up-" + server_id + ".sock")),
        agent_port(konn::testsupport::free_tcp_port()),
        health_port(konn::testsupport::free_tcp_port()),
        admin_port(konn::testsupport::free_tcp_port()) {
    ProcessOptions o;
    o.binary = bin + "/server";
    o.args = {"--mode=grpc", "--uds-name=" + sock, "--delete-existing-uds-file",
              "--server-port=0", "--agent-bind-address=127.0.0.1",
              "--agent-port=" + std::to_string(agent_port), "--health-bind-address=127.0.0.1",
              "--health-port=" + std::to_string(health_port), "--admin-bind-address=127.0.0.1",
              "--admin-port=" + std::to_string(admin_port), "--cluster-cert=" + certs.server_crt,
              "--cluster-key=" + certs.server_key, "--cluster-ca-cert=" + certs.ca_crt,
              "--server-id=" + id, "--server-count=" + std::to_string(server_count)};
    o.log_path = dir.file("up-server-" + id + ".log");
    process = std::make_unique<Process>(std::move(o));
    if (!process->wait_for_tcp_port(agent_port, 20s) ||
        !process->wait_for_unix_socket(sock, 20s)) {
      FAIL("upstream server " << id << " did not come up:\n" << process->log());
    }
  }
  std::shared_ptr<grpc::Channel> channel() const {
    konn::testclient::ChannelConfig cc;
    cc.uds_path = sock;
    auto ch = konn::testclient::make_channel(cc);
    REQUIRE(ch->WaitForConnected(std::chrono::system_clock::now() + 10s));
    return ch;
  }
  // ready_backend_connections (v0.30.4's name; it counts agents), on the admin port there.
  int agents() const {
    return static_cast<int>(
        upstream_metric(admin_port, "konnectivity_network_proxy_server_ready_backend_connections"));
  }
  std::string id;
  std::string sock;
  uint16_t agent_port;
  uint16_t health_port;
  uint16_t admin_port;
  std::unique_ptr<Process> process;
};

// Upstream's proxy-agent towards 127.0.0.1:<port>.
struct UpstreamAgent {
  UpstreamAgent(const std::string& bin, const konn::testsupport::TempDir& dir,
                const konn::testsupport::TestCerts& certs, const std::string& id, uint16_t port)
      : health_port(konn::testsupport::free_tcp_port()) {
    ProcessOptions o;
    o.binary = bin + "/agent";
    o.args = {"--proxy-server-host=127.0.0.1",
              "--proxy-server-port=" + std::to_string(port),
              "--ca-cert=" + certs.ca_crt,
              "--agent-cert=" + certs.agent_crt,
              "--agent-key=" + certs.agent_key,
              "--agent-id=" + id,
              "--sync-interval=100ms",
              "--sync-interval-cap=1s",
              "--probe-interval=200ms",
              "--health-server-host=127.0.0.1",
              "--health-server-port=" + std::to_string(health_port),
              "--admin-bind-address=127.0.0.1",
              "--admin-server-port=" + std::to_string(konn::testsupport::free_tcp_port())};
    o.log_path = dir.file("up-agent-" + id + ".log");
    process = std::make_unique<Process>(std::move(o));
  }
  int servers() const {
    return static_cast<int>(
        upstream_metric(health_port, "konnectivity_network_proxy_agent_open_server_connections"));
  }
  // Successful endpoint dials (dial_duration_seconds observes each).
  int dials() const {
    return static_cast<int>(
        upstream_metric(health_port, "konnectivity_network_proxy_agent_dial_duration_seconds_count"));
  }
  uint16_t health_port;
  std::unique_ptr<Process> process;
};

}  // namespace

TEST_CASE(
    "mixed fleet: konn server with upstream-like agents: dials reach both, a draining agent "
    "gets no new dials, and is the fallback once alone",
    "[e2e][peers][mixed]") {
  require_binaries({"proxy-server", "upstream-agent"});
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-mixed"};
  konn::testsupport::EchoServer echo;
  FleetServer s(certs, "s1", {});
  s.start();
  auto a = upstream_like_agent(dir, certs, "up-a", s.agent_port());
  auto b = upstream_like_agent(dir, certs, "up-b", s.agent_port());
  REQUIRE(eventually([&] { return s.ready_agents() == 2; }, 20s));
  auto ch = s.channel();
  const std::string to = echo.address();

  // Random choice: 40 dials reach both agents.
  for (int i = 0; i < 40; ++i) echo_tunnel(ch, to)->close();
  CHECK(eventually([&] { return served(*a, to) + served(*b, to) == 40; }, 10s));
  CHECK(served(*a, to) > 0);
  CHECK(served(*b, to) > 0);

  // SIGTERM: upstream's agent sends DRAIN and keeps serving; the server routes around it.
  a->kill(SIGTERM);
  REQUIRE(a->wait_for_log("sent DRAIN serverID=s1", 10s));
  REQUIRE(s.process().wait_for_log("agent up-a is draining", 10s));
  int a_before = served(*a, to);
  int b_before = served(*b, to);
  for (int i = 0; i < 12; ++i) echo_tunnel(ch, to)->close();
  CHECK(eventually([&] { return served(*b, to) == b_before + 12; }, 10s));
  CHECK(served(*a, to) == a_before);
  CHECK(a->running());

  // The other agent is gone: the draining one is all the server has, and takes every dial.
  b.reset();
  REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));
  for (int i = 0; i < 5; ++i) echo_tunnel(ch, to)->close();
  CHECK(eventually([&] { return served(*a, to) == a_before + 5; }, 10s));

  a->kill(SIGTERM);
  CHECK(a->wait_exit(10s) == 0);
  CHECK(eventually([&] { return s.ready_agents() == 0; }, 10s));
}

TEST_CASE(
    "mixed fleet: konn servers with an upstream-like agent: the servercount header, and DRAIN "
    "to every server",
    "[e2e][peers][mixed]") {
  require_binaries({"proxy-server", "upstream-agent"});
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-mixed"};
  konn::testsupport::EchoServer echo;
  auto servers = two_servers(certs, {"--server-count=2"});
  TcpBalancer lb;
  lb.set_backends(agent_ports(servers));
  auto a = upstream_like_agent(dir, certs, "up-a", lb.port());
  // servercount=2 from the first server: it keeps dialling the one address until it holds a
  // stream to both.
  REQUIRE(a->wait_for_log("streams: 2)", 20s));
  for (auto& s : servers) {
    INFO("server " << s->id());
    REQUIRE(eventually([&] { return s->ready_agents() == 1; }, 10s));
    echo_tunnel(s->channel(), echo.address())->close();
  }
  CHECK(a->count_in_log("serverCount=2") == 2);

  a->kill(SIGTERM);
  for (auto& s : servers) {
    INFO("server " << s->id());
    CHECK(s->process().wait_for_log("agent up-a is draining", 10s));
    // The only agent, draining: still every server's fallback.
    echo_tunnel(s->channel(), echo.address())->close();
  }
  CHECK(a->count_in_log("sent DRAIN serverID=") == 2);
  a->kill(SIGTERM);
  CHECK(a->wait_exit(10s) == 0);
}

TEST_CASE(
    "mixed fleet: konn servers' Leases counted by an upstream-like agent "
    "(--count-server-leases)",
    "[e2e][peers][mixed][lease]") {
  require_binaries({"proxy-server", "upstream-agent"});
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-mixed"};
  konn::testsupport::EchoServer echo;
  konn::testsupport::FakeApiserver api(certs.server_crt, certs.server_key, "lease-caller");
  std::string kubeconfig = api.write_kubeconfig(dir.path(), certs.ca_crt);
  // --server-count=1: only the Leases can tell the agent there are two servers.
  auto servers = two_servers(certs, {"--server-count=1", "--enable-lease-controller",
                                     "--kubeconfig=" + kubeconfig, "--lease-renew-interval=1s"});
  REQUIRE(eventually([&] { return api.lease_names("kube-system").size() == 2; }, 20s));
  TcpBalancer lb;
  lb.set_backends(agent_ports(servers));
  auto a = upstream_like_agent(
      dir, certs, "up-a", lb.port(),
      {"--count-server-leases", "--lease-api=https://127.0.0.1:" + std::to_string(api.port()),
       "--lease-ca=" + certs.ca_crt, "--lease-token=lease-caller"});
  REQUIRE(a->wait_for_log("lease count 2", 20s));
  REQUIRE(a->wait_for_log("streams: 2)", 20s));
  CHECK(a->count_in_log("serverCount=1") == 2);  // the header alone would have stopped at one
  for (auto& s : servers) {
    INFO("server " << s->id());
    REQUIRE(eventually([&] { return s->ready_agents() == 1; }, 10s));
    echo_tunnel(s->channel(), echo.address())->close();
  }
  CHECK(api.lease_calls("list") > 0);
}

// By hand: KONN_UPSTREAM_BIN=~/.cache/konn-upstream/v0.30.4/bin. v0.30.4 predates DRAIN (its
// agent dies on SIGTERM; its server ignores the packet) and lease counting (both v0.31).
TEST_CASE(
    "mixed fleet: konn servers with upstream v0.30.4 agents: servercount, dials, an agent's "
    "SIGTERM",
    "[e2e][peers][mixed][upstream]") {
  std::string bin = upstream_bin();
  if (bin.empty()) return;
  require_binaries({"proxy-server"});
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-mixed"};
  konn::testsupport::EchoServer echo;
  auto servers = two_servers(certs, {"--server-count=2"});
  TcpBalancer lb;
  lb.set_backends(agent_ports(servers));
  // Both follow konn's servercount header through the one balanced address (one after the
  // other: two agents retrying in step through a round-robin balancer can meet the same server
  // many times in a row).
  UpstreamAgent a(bin, dir, certs, "up-a", lb.port());
  REQUIRE(eventually([&] { return a.servers() == 2; }, 30s));
  UpstreamAgent b(bin, dir, certs, "up-b", lb.port());
  REQUIRE(eventually([&] { return b.servers() == 2; }, 30s));
  for (auto& s : servers) {
    INFO("server " << s->id());
    REQUIRE(eventually([&] { return s->ready_agents() == 2; }, 10s));
    for (int i = 0; i < 10; ++i) echo_tunnel(s->channel(), echo.address())->close();
  }
  CHECK(eventually([&] { return a.dials() + b.dials() == 20; }, 10s));
  CHECK(a.dials() > 0);
  CHECK(b.dials() > 0);
  // v0.30.4 has no DRAIN: SIGTERM ends it at once. Each server drops it; dials go to the other.
  a.process->kill(SIGTERM);
  CHECK(a.process->wait_exit(10s).has_value());
  int b_before = b.dials();
  for (auto& s : servers) {
    INFO("server " << s->id());
    REQUIRE(eventually([&] { return s->ready_agents() == 1; }, 10s));
    CHECK(s->process().count_in_log("is draining") == 0);
    for (int i = 0; i < 5; ++i) echo_tunnel(s->channel(), echo.address())->close();
  }
  CHECK(eventually([&] { return b.dials() == b_before + 10; }, 10s));
}

TEST_CASE(
    "mixed fleet: upstream v0.30.4 servers with konn agents: servercount, dials, and a konn "
    "agent's drain",
    "[e2e][peers][mixed][upstream]") {
  std::string bin = upstream_bin();
  if (bin.empty()) return;
  require_binaries({"proxy-agent"});
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-mixed"};
  konn::testsupport::EchoServer echo;
  UpstreamServer s1(bin, dir, certs, "u1", 2);
  UpstreamServer s2(bin, dir, certs, "u2", 2);
  TcpBalancer lb;
  lb.set_backends({s1.agent_port, s2.agent_port});
  // Upstream's servercount header (2) makes each konn agent hold a stream to both servers. One
  // agent after the other: two agents retrying in step through this round-robin balancer can
  // meet the same server many times in a row.
  FleetAgent a(dir, certs, "konn-a", lb.port(), {});
  REQUIRE(eventually([&] { return a.servers() == 2; }, 30s));
  FleetAgent b(dir, certs, "konn-b", lb.port(), {});
  REQUIRE(eventually([&] { return b.servers() == 2; }, 30s));
  for (auto* s : {&s1, &s2}) {
    INFO("upstream server " << s->id);
    REQUIRE(eventually([&] { return s->agents() == 2; }, 10s));
    auto ch = s->channel();
    for (int i = 0; i < 10; ++i) echo_tunnel(ch, echo.address())->close();
  }
  CHECK(eventually([&] { return a.dials() + b.dials() == 20; }, 10s));
  CHECK(a.dials() > 0);
  CHECK(b.dials() > 0);

  // konn's agent sends DRAIN; v0.30.4 does not know the packet and keeps routing to it. The
  // agent stays up while draining, so every dial still succeeds.
  a.process().kill(SIGTERM);
  REQUIRE(a.process().wait_for_log("DRAIN to 2 server(s)", 10s));
  int a_before = a.dials();
  for (auto* s : {&s1, &s2}) {
    auto ch = s->channel();
    for (int i = 0; i < 10; ++i) echo_tunnel(ch, echo.address())->close();
  }
  CHECK(eventually([&] { return a.dials() + b.dials() == 40; }, 10s));
  WARN("dials to the draining konn agent under upstream v0.30.4 servers: " << a.dials() - a_before
                                                                          << " of 20");
  CHECK(a.process().running());
  CHECK(s1.process->running());
  CHECK(s2.process->running());
  a.process().kill(SIGTERM);
  CHECK(a.process().wait_exit(20s) == 0);
  for (auto* s : {&s1, &s2}) {
    REQUIRE(eventually([&] { return s->agents() == 1; }, 10s));
    echo_tunnel(s->channel(), echo.address())->close();
  }
}
