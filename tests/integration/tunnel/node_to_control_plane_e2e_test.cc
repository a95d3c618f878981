// Node to control plane (KEP-2025) end to end: node-side clients (curl, kubectl, raw sockets)
// connect to the agent's --node-to-control-plane-listen address and reach, through the agent's
// stream and the proxy-server, the TLS apiserver fixture (tests/support/kubeproxy_apiserver.cc)
// or an echo origin on the server's --node-to-control-plane-destinations list.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>

#include "test-client/channel.h"
#include "test-client/tunnel.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/integration/tunnel/e2e_util.h"
#include "tests/integration/tunnel/tunnel_stack.h"
#include "tests/support/download_body.h"
#include "tests/support/loopback.h"
#include "tests/support/sanitizers.h"
#include "tests/support/tcp_balancer.h"

using namespace konn::e2e;
using konn::testsupport::eventually;
using konn::testsupport::free_tcp_port;
using konn::testsupport::kSlowFactor;
using konn::testsupport::Process;
using konn::testsupport::ProcessOptions;
using konn::testsupport::run_process;
using konn::testsupport::scaled_bytes;
using Clock = std::chrono::steady_clock;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A program from $PATH; its stdout is returned in `output` (stderr is appended after it).
konn::testsupport::RunResult run(const konn::testsupport::TempDir& dir, std::string program,
                                 std::vector<std::string> args,
                                 std::chrono::milliseconds timeout = 30s) {
  static int n = 0;
  ProcessOptions o;
  o.binary = std::move(program);
  o.search_path = true;
  o.args = std::move(args);
  std::string out = dir.file("run-" + std::to_string(++n) + ".out");
  o.stdout_path = out;
  auto r = run_process(std::move(o), timeout);
  r.output = read_file(out) + r.output;
  return r;
}

// A raw TCP connection to 127.0.0.1:port, blocking, with TCP_NODELAY.
class Conn {
 public:
  explicit Conn(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  bool connected() const { return connected_; }
  bool write(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  // Reads until `n` bytes came, EOF, an error, or `timeout` without data.
  std::string read(size_t n, std::chrono::milliseconds timeout) {
    std::string out;
    char buf[65536];
    while (out.size() < n) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) break;
      ssize_t got = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0) {
        ended_ = true;
        break;
      }
      out.append(buf, static_cast<size_t>(got));
    }
    return out;
  }
  // Waits for EOF or a reset (after reading and dropping any bytes); false on timeout.
  bool wait_closed(std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    char buf[4096];
    while (Clock::now() < deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
      if (::recv(fd_, buf, sizeof buf, 0) <= 0) return true;
    }
    return false;
  }
  bool ended() const { return ended_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool ended_ = false;
};

// The fixture: certificates, the TLS apiserver fixture (client certificates verified against the
// test CA), an echo origin, `servers` proxy-servers allowing both (behind a TCP balancer when
// there are two), and one agent listening on three addresses: towards the apiserver (the server's
// first destination), towards the echo origin, and towards a destination the servers refuse.
struct NodeStack {
  explicit NodeStack(int n_servers = 1, bool node_servers = true,
                     std::vector<std::string> server_extra = {},
                     std::vector<std::string> agent_extra_args = {})
      : certs(konn::testsupport::test_certs()), agent_extra(std::move(agent_extra_args)) {
    ProcessOptions a;
    a.binary = "kubeproxy-fake-apiserver";
    a.args = {"--cert",      certs.server_crt, "--key", certs.server_key, "--client-ca",
              certs.ca_crt, "--port",          std::to_string(api_port)};
    a.log_path = dir.file("apiserver.log");
    api = std::make_unique<Process>(std::move(a));
    if (!api->wait_for_tcp_port(api_port, 10s)) {
      throw std::runtime_error("apiserver fixture did not start: " + api->log());
    }
    std::vector<uint16_t> ports;
    for (int i = 0; i < n_servers; ++i) {
      ServerSpec spec;
      spec.extra_args = {"--server-count=" + std::to_string(n_servers)};
      spec.extra_args.insert(spec.extra_args.end(), server_extra.begin(), server_extra.end());
      if (node_servers) {
        spec.extra_args.push_back("--node-to-control-plane-destinations=127.0.0.1:" +
                                  std::to_string(api_port) + "," + echo.address());
      }
      servers.push_back(std::make_unique<ServerProcess>(dir, certs, spec));
      servers.back()->start();
      ports.push_back(servers.back()->agent_port());
    }
    balancer.set_backends(ports);
    start_agent_process();
  }

  void start_agent_process() {
    AgentSpec spec;
    spec.extra_args = {
        "--health-server-port=0",
        "--admin-server-port=0",
        "--node-to-control-plane-listen=127.0.0.1:" + std::to_string(api_listen),
        "--node-to-control-plane-listen=127.0.0.1:" + std::to_string(echo_listen) + "=" +
            echo.address(),
        "--node-to-control-plane-listen=127.0.0.1:" + std::to_string(refused_listen) +
            "=127.0.0.1:1"};
    spec.extra_args.insert(spec.extra_args.end(), agent_extra.begin(), agent_extra.end());
    uint16_t port = servers.size() > 1 ? balancer.port() : servers.front()->agent_port();
    agent = start_agent(dir, certs, port, spec);
    for (auto& s : servers) {
      if (!s->wait_agent_connected(spec.id, 20s)) {
        throw std::runtime_error("agent did not connect; agent log:\n" + agent->log());
      }
    }
    if (!agent->wait_for_tcp_port(api_listen, 10s)) {
      throw std::runtime_error("agent listener not up: " + agent->log());
    }
    // That probe was a node-side connection too: wait until it is gone, so that it counts
    // against no limit of the test.
    eventually(
        [&] {
          std::string log = agent->log();
          return log.find("] closed: ") != std::string::npos ||
                 log.find("closed: no proxy-server connected") != std::string::npos;
        },
        10s);
  }

  // Every server confirmed (the agent logged it once per stream).
  bool node_ready(std::chrono::milliseconds timeout) const {
    return agent->wait_for_log("node-to-control-plane=on", timeout, servers.size());
  }

  std::string url(const std::string& path) const {
    return "https://127.0.0.1:" + std::to_string(api_listen) + path;
  }
  std::vector<std::string> curl_tls(bool client_cert = true) const {
    std::vector<std::string> a{"-sS", "--max-time", "120", "--cacert", certs.ca_crt};
    if (client_cert) {
      a.insert(a.end(), {"--cert", certs.client_crt, "--key", certs.client_key});
    }
    return a;
  }

  konn::testsupport::TempDir dir{"konn-node"};
  const konn::testsupport::TestCerts& certs;
  std::vector<std::string> agent_extra;
  konn::testsupport::EchoServer echo{true};
  uint16_t api_port = free_tcp_port();
  uint16_t api_listen = free_tcp_port();
  uint16_t echo_listen = free_tcp_port();
  uint16_t refused_listen = free_tcp_port();
  std::unique_ptr<Process> api;
  konn::testsupport::TcpBalancer balancer;
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::unique_ptr<Process> agent;
};

// The /metrics text of a daemon whose log says "admin listening on 127.0.0.1:PORT".
std::string scrape_admin(const konn::testsupport::TempDir& dir, const Process& p) {
  std::string log = p.log();
  const std::string needle = "admin listening on 127.0.0.1:";
  auto at = log.find(needle);
  if (at == std::string::npos) return {};
  int port = std::stoi(log.substr(at + needle.size()));
  return run(dir, "curl", {"-sS", "http://127.0.0.1:" + std::to_string(port) + "/metrics"}).output;
}

// One echo round trip through the agent's echo listener.
bool echo_round_trip(Conn& c, const std::string& msg) {
  return c.write(msg) && c.read(msg.size(), 5s * kSlowFactor) == msg;
}

}  // namespace

TEST_CASE("node to control plane: curl and kubectl reach the TLS apiserver through the agent",
          "[e2e][node]") {
  KONN_REQUIRE_DAEMONS();
  NodeStack s;
  REQUIRE(s.node_ready(10s));

  // TLS verifies against the apiserver's certificate (SAN 127.0.0.1), and the fixture sees the
  // client certificate: TLS went through the tunnel untouched.
  auto args = s.curl_tls();
  args.push_back(s.url("/whoami"));
  auto r = run(s.dir, "curl", args);
  INFO(r.output << "\nagent:\n" << s.agent->log());
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("\"cn\":\"kube-apiserver\"") != std::string::npos);

  // Without a client certificate the fixture authenticates nobody.
  auto anon = s.curl_tls(false);
  anon.push_back(s.url("/whoami"));
  auto r2 = run(s.dir, "curl", anon);
  INFO(r2.output);
  CHECK(r2.exit_code == 0);
  CHECK(r2.output.find("Unauthorized") != std::string::npos);

  // kubectl with a kubelet-style kubeconfig whose server is the node-local address.
  std::string kubeconfig = s.dir.file("kubelet.kubeconfig");
  {
    std::ofstream k(kubeconfig);
    k << "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
      << "    server: " << s.url("") << "\n    certificate-authority: " << s.certs.ca_crt
      << "\nusers:\n- name: u\n  user:\n    client-certificate: " << s.certs.client_crt
      << "\n    client-key: " << s.certs.client_key
      << "\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n"
      << "current-context: x\n";
  }
  r = run(s.dir, "kubectl", {"--kubeconfig", kubeconfig, "get", "--raw", "/whoami"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("\"cn\":\"kube-apiserver\"") != std::string::npos);
  auto r3 = run(s.dir, "kubectl",
                {"--kubeconfig", kubeconfig, "get", "--raw", "/api/v1/namespaces/default/pods"});
  INFO(r3.output);
  CHECK(r3.exit_code == 0);
  CHECK(r3.output.find("\"kind\":\"PodList\"") != std::string::npos);

  // The server logged each tunnel with its ids and the agent's identity.
  CHECK(s.servers[0]->process().wait_for_log("[node C1 D", 5s));
  CHECK(s.servers[0]->process().log().find(" Aagent-1] closed") != std::string::npos);
}

TEST_CASE("node to control plane: a large transfer keeps every byte, both ways", "[e2e][node]") {
  KONN_REQUIRE_DAEMONS();
  NodeStack s;
  REQUIRE(s.node_ready(10s));
  // 1 GiB over TLS as the issue asks (about 5 s in the optimised build); an eighth under
  // sanitizers. KONN_NODE_BULK_BYTES overrides it.
  unsigned long long bytes = scaled_bytes(1ULL << 30);
  if (const char* env = std::getenv("KONN_NODE_BULK_BYTES")) bytes = std::stoull(env);
  auto tls = s.curl_tls();
  std::string flags;
  for (const auto& a : tls) flags += " '" + a + "'";
  // What the fixture's /download sends (tests/support/download_body.h).
  std::string expected;
  {
    Sha256 h;
    std::string piece(konn::testsupport::kDownloadPiece, '\0');
    uint64_t k = 0;
    for (unsigned long long left = bytes; left > 0; ++k) {
      konn::testsupport::download_piece(k, piece.data());
      size_t n = static_cast<size_t>(std::min<unsigned long long>(left, piece.size()));
      h.update(std::string_view(piece.data(), n));
      left -= n;
    }
    expected = h.hex();
  }
  std::string url = s.url("/download?bytes=" + std::to_string(bytes));
  auto start = Clock::now();
  auto through = run(s.dir, "sh", {"-c", "curl" + flags + " '" + url + "' | sha256sum"}, 300s);
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  INFO("download of " << bytes << " bytes took " << secs << " s\n" << through.output);
  REQUIRE(through.exit_code == 0);
  CHECK(through.output.substr(0, 64) == expected);

  // Upload over TLS: a random body to the fixture's /echo, which sends it back.
  size_t up = scaled_bytes(16ULL << 20);
  std::string body = s.dir.file("body.bin");
  {
    std::ofstream out(body, std::ios::binary);
    out << random_bytes(up, 7);
  }
  auto echoed = run(s.dir, "sh",
                    {"-c", "curl" + flags + " --data-binary @'" + body + "' '" + s.url("/echo") +
                               "' | sha256sum"},
                    300s);
  auto sent = run(s.dir, "sha256sum", {body});
  REQUIRE(echoed.exit_code == 0);
  CHECK(echoed.output.substr(0, 64) == sent.output.substr(0, 64));

  // Random bytes both ways at once through the echo listener: what the origin received and
  // what came back both match what was sent, in order.
  const size_t chunks = scaled_bytes(256) ;  // MiB
  Conn c(s.echo_listen);
  REQUIRE(c.connected());
  Sha256 sent_hash;
  std::thread writer([&] {
    for (size_t i = 0; i < chunks; ++i) {
      if (!c.write(random_bytes(1 << 20, 100 + i))) return;
    }
    c.shutdown_write();
  });
  for (size_t i = 0; i < chunks; ++i) sent_hash.update(random_bytes(1 << 20, 100 + i));
  Sha256 back;
  size_t got = 0;
  while (got < chunks << 20) {
    std::string part = c.read(std::min<size_t>(1 << 20, (chunks << 20) - got), 10s * kSlowFactor);
    if (part.empty()) break;
    got += part.size();
    back.update(part);
  }
  writer.join();
  std::string want = sent_hash.hex();
  CHECK(got == chunks << 20);
  CHECK(back.hex() == want);
  CHECK(eventually(
      [&] {
        auto d = s.echo.digests();
        return std::find(d.begin(), d.end(), want) != d.end();
      },
      5s * kSlowFactor));
}

TEST_CASE("node to control plane: a stalled node-side client holds up no other tunnel",
          "[e2e][node]") {
  KONN_REQUIRE_DAEMONS();
  NodeStack s;
  REQUIRE(s.node_ready(10s));
  // This client sends 64 MiB to the echo origin and reads nothing back: its tunnel fills its
  // windows and stops, the rest of the agent's stream does not.
  Conn stalled(s.echo_listen);
  REQUIRE(stalled.connected());
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};
  std::thread writer([&] {
    const std::string chunk(1 << 20, 's');
    for (int i = 0; i < 64 && !stop; ++i) {
      if (!stalled.write(chunk)) break;
    }
    done = true;
  });
  std::this_thread::sleep_for(300ms);
  Conn other(s.echo_listen);
  REQUIRE(other.connected());
  for (int i = 0; i < 50; ++i) {
    auto t0 = Clock::now();
    INFO("round trip " << i);
    REQUIRE(echo_round_trip(other, "ping " + std::to_string(i)));
    CHECK(Clock::now() - t0 < 500ms * kSlowFactor);
  }
  // The stalled tunnel is bounded: the origin received about its windows' and socket buffers'
  // worth, not 64 MiB.
  uint64_t echoed = s.echo.bytes_echoed();
  INFO("echoed while stalled: " << echoed);
  CHECK(echoed < (48ULL << 20));
  CHECK(echoed > (1ULL << 20));
  // Reading lets the stalled tunnel finish.
  stop = true;
  size_t drained = 0;
  while (!done) drained += stalled.read(1 << 20, 100ms).size();
  stalled.shutdown_write();
  for (std::string part; !(part = stalled.read(1 << 20, 2s * kSlowFactor)).empty();) {
    drained += part.size();
  }
  writer.join();
  CHECK(drained > 0);
  CHECK(stalled.ended());
}

TEST_CASE("node to control plane: many concurrent connections", "[e2e][node]") {
  KONN_REQUIRE_DAEMONS();
  NodeStack s;
  REQUIRE(s.node_ready(10s));
  // 200 TLS requests, 64 at a time, each on its own connection (the fixture speaks HTTP/1.1).
  auto args = s.curl_tls();
  args.insert(args.end(), {"-Z", "--parallel-max", "64", "-w", "%{http_code}\n"});
  for (int i = 0; i < 200; ++i) {
    args.insert(args.end(), {"-o", "/dev/null", s.url("/whoami")});
  }
  auto r = run(s.dir, "curl", args, 120s);
  INFO(r.output.substr(0, 2000));
  CHECK(r.exit_code == 0);
  size_t ok = 0;
  for (size_t at = 0; (at = r.output.find("200\n", at)) != std::string::npos; at += 4) ++ok;
  CHECK(ok == 200);

  // And raw connections held open at once through the echo listener.
  std::vector<std::unique_ptr<Conn>> conns;
  for (int i = 0; i < 100; ++i) conns.push_back(std::make_unique<Conn>(s.echo_listen));
  for (size_t i = 0; i < conns.size(); ++i) {
    INFO("connection " << i);
    REQUIRE(echo_round_trip(*conns[i], "ping " + std::to_string(i)));
  }
  CHECK(s.echo.active() == 100);
}

TEST_CASE("node to control plane: half-close passes through", "[e2e][node]") {
  KONN_REQUIRE_DAEMONS();
  NodeStack s;
  REQUIRE(s.node_ready(10s));
  // The client sends, then shuts down its write side; the echo origin echoes everything and
  // closes only after our EOF reached it. Without half-close the EOF would end the tunnel before
  // the echo came back.
  Conn c(s.echo_listen);
  REQUIRE(c.connected());
  std::string msg = random_bytes(300000, 3);
  REQUIRE(c.write(msg));
  c.shutdown_write();
  CHECK(c.read(msg.size(), 10s * kSlowFactor) == msg);
  CHECK(c.wait_closed(5s * kSlowFactor));
}

TEST_CASE("node to control plane: a destination outside the allowlist is refused",
          "[e2e][node]") {
  KONN_REQUIRE_DAEMONS();
  NodeStack s;
  REQUIRE(s.node_ready(10s));
  Conn c(s.refused_listen);
  REQUIRE(c.connected());
  CHECK(c.wait_closed(5s * kSlowFactor));
  auto& log = s.servers[0]->process();
  CHECK(log.wait_for_log("dial to tcp 127.0.0.1:1 refused: not in "
                         "--node-to-control-plane-destinations (agent agent-1 from ",
                         5s));
  CHECK(s.agent->wait_for_log("dial failed at the server: dial tcp 127.0.0.1:1: konn "
                              "proxy-server: destination not in "
                              "--node-to-control-plane-destinations",
                              5s));
  // The allowed listeners still work.
  Conn ok(s.echo_listen);
  CHECK(echo_round_trip(ok, "still fine"));
}

TEST_CASE("node to control plane: an agent killed closes the server's side within a second",
          "[e2e][node]") {
  KONN_REQUIRE_DAEMONS();
  NodeStack s;
  REQUIRE(s.node_ready(10s));
  std::vector<std::unique_ptr<Conn>> conns;
  for (int i = 0; i < 5; ++i) {
    conns.push_back(std::make_unique<Conn>(s.echo_listen));
    REQUIRE(echo_round_trip(*conns.back(), "x"));
  }
  REQUIRE(s.echo.active() == 5);
  auto start = Clock::now();
  s.agent->kill(SIGKILL);
  // The node-side sockets die with the agent; the server must close its destination side.
  for (auto& c : conns) CHECK(c->wait_closed(1s * kSlowFactor));
  CHECK(eventually([&] { return s.echo.active() == 0; }, 1s * kSlowFactor));
  INFO("closed after " << std::chrono::duration<double>(Clock::now() - start).count() << " s");
}

TEST_CASE("node to control plane: a draining agent closes its node-side connections at once",
          "[e2e][node]") {
  KONN_REQUIRE_DAEMONS();
  NodeStack s;
  REQUIRE(s.node_ready(10s));
  std::vector<std::unique_ptr<Conn>> conns;
  for (int i = 0; i < 3; ++i) {
    conns.push_back(std::make_unique<Conn>(s.echo_listen));
    REQUIRE(echo_round_trip(*conns.back(), "x"));
  }
  s.agent->kill(SIGTERM);
  for (auto& c : conns) CHECK(c->wait_closed(1s * kSlowFactor));
  CHECK(s.agent->wait_for_log("closing 3 node-to-control-plane connection(s): agent draining", 5s));
  // The servers were told: their destination side is closed too.
  CHECK(eventually([&] { return s.echo.active() == 0; }, 1s * kSlowFactor));
  // And the listener is gone: a new node-side connection is refused by the kernel.
  Conn late(s.echo_listen);
  CHECK((!late.connected() || late.wait_closed(1s * kSlowFactor)));
}

TEST_CASE("node to control plane: two servers share the load, a server killed resets its tunnels",
          "[e2e][node]") {
  KONN_REQUIRE_DAEMONS();
  NodeStack s(2);
  REQUIRE(s.node_ready(10s));
  std::vector<std::unique_ptr<Conn>> conns;
  for (int i = 0; i < 10; ++i) {
    conns.push_back(std::make_unique<Conn>(s.echo_listen));
    REQUIRE(echo_round_trip(*conns.back(), "x"));
  }
  // Least-loaded choice: each server carries half of the open connections, so killing one
  // resets exactly half of them.
  // Kill the first server and count the connections that end within a second.
  auto start = Clock::now();
  s.servers[0]->kill();
  // (The survivors' round trips below show that no more than half were reset.)
  std::vector<bool> closed(conns.size(), false);
  size_t reset = 0;
  while (Clock::now() - start < 1s * kSlowFactor && reset < conns.size() / 2) {
    for (size_t i = 0; i < conns.size(); ++i) {
      if (!closed[i] && conns[i]->wait_closed(5ms)) closed[i] = true;
    }
    reset = static_cast<size_t>(std::count(closed.begin(), closed.end(), true));
  }
  INFO("connections reset by the server's death: " << reset);
  CHECK(reset == 5);
  // The survivors still carry bytes, and new connections go to the remaining server.
  for (size_t i = 0; i < conns.size(); ++i) {
    if (!closed[i]) CHECK(echo_round_trip(*conns[i], "still"));
  }
  for (int i = 0; i < 5; ++i) {
    Conn fresh(s.echo_listen);
    CHECK(echo_round_trip(fresh, "after"));
  }
}

TEST_CASE("node to control plane: servers without it leave the normal direction working",
          "[e2e][node]") {
  KONN_REQUIRE_DAEMONS();
  NodeStack s(1, false);
  // The agent logs one clear error for that server, and keeps serving tunnels towards the node.
  CHECK(s.agent->wait_for_log("did not confirm node to control plane", 10s));
  Conn c(s.echo_listen);
  REQUIRE(c.connected());
  auto start = Clock::now();
  CHECK(c.wait_closed(1s * kSlowFactor));
  CHECK(Clock::now() - start < 1s * kSlowFactor);
  CHECK(s.agent->wait_for_log("no proxy-server connected that confirmed node to control plane",
                              5s));
  s.servers[0]->process().wait_for_log("agent connected", 1s);
  auto channel = s.servers[0]->new_channel();
  REQUIRE(channel->WaitForConnected(std::chrono::system_clock::now() + 10s));
  auto d = konn::testclient::Tunnel::dial(channel, s.echo.address(), 5s);
  REQUIRE(d.error.empty());
  std::string msg = "forward direction";
  REQUIRE(d.tunnel->write(msg));
  CHECK(read_exactly(*d.tunnel, msg.size(), 5s) == msg);
  d.tunnel->close(5s);
  // The error was logged once, not per connection.
  Conn again(s.echo_listen);
  CHECK(again.wait_closed(1s * kSlowFactor));
  std::string log = s.agent->log();
  size_t first = log.find("did not confirm node to control plane");
  CHECK(log.find("did not confirm node to control plane", first + 1) == std::string::npos);
}

TEST_CASE("node to control plane: limits refuse the connection alone, logged and counted",
          "[e2e][node]") {
  KONN_REQUIRE_DAEMONS();
  SECTION("the agent's --max-node-to-control-plane-connections") {
    NodeStack s(1, true, {}, {"--max-node-to-control-plane-connections=2"});
    REQUIRE(s.node_ready(10s));
    std::this_thread::sleep_for(100ms);  // the probe's connection is released a moment later
    Conn a(s.echo_listen), b(s.echo_listen);
    REQUIRE(echo_round_trip(a, "a"));
    REQUIRE(echo_round_trip(b, "b"));
    Conn c(s.echo_listen);
    CHECK(c.wait_closed(1s * kSlowFactor));
    // Logged even when a connection made while the agent was still connecting (the readiness
    // probe) was refused less than a second earlier: each reason has its own rate limit.
    bool logged = s.agent->wait_for_log("(--max-node-to-control-plane-connections)", 5s);
    INFO("agent log:\n" << s.agent->log());
    CHECK(logged);
    CHECK(echo_round_trip(a, "a still"));
    std::string metrics = scrape_admin(s.dir, *s.agent);
    INFO(metrics);
    CHECK(metrics.find("konn_agent_node_dial_failures_total{reason=\"limit\"} 1") !=
          std::string::npos);
    CHECK(metrics.find("konn_agent_node_connections 2") != std::string::npos);
  }
  SECTION("the server's --max-node-to-control-plane-connections") {
    NodeStack s(1, true, {"--max-node-to-control-plane-connections=1"});
    REQUIRE(s.node_ready(10s));
    std::this_thread::sleep_for(100ms);  // the probe's tunnel is released a moment later
    Conn a(s.echo_listen);
    REQUIRE(echo_round_trip(a, "a"));
    Conn b(s.echo_listen);
    CHECK(b.wait_closed(1s * kSlowFactor));
    auto& server = s.servers[0]->process();
    CHECK(server.wait_for_log("node-to-control-plane tunnels open "
                              "(--max-node-to-control-plane-connections)",
                              5s));
    CHECK(echo_round_trip(a, "a still"));
    std::string metrics = scrape_admin(s.dir, server);
    INFO(metrics);
    CHECK(metrics.find("konn_server_node_dial_failures_total{reason=\"limit\"} 1") !=
          std::string::npos);
    CHECK(metrics.find("konn_server_node_connections 1") != std::string::npos);
    CHECK(metrics.find("konn_server_node_bytes_total{direction=\"to_destination\"} 8") !=
          std::string::npos);
  }
}

// Against upstream ANP's Go binaries (bench/build-upstream.sh), when KONN_UPSTREAM_BIN names the
// directory holding `server` and `agent` (CI does not have them).
TEST_CASE("node to control plane: upstream Go server and agent are unaffected",
          "[e2e][node][upstream]") {
  KONN_REQUIRE_DAEMONS();
  const char* env = std::getenv("KONN_UPSTREAM_BIN");
  if (env == nullptr || *env == '\0') {
    WARN("KONN_UPSTREAM_BIN not set: upstream compatibility not checked");
    return;
  }
  std::string ub = env;
  REQUIRE(::access((ub + "/server").c_str(), X_OK) == 0);
  REQUIRE(::access((ub + "/agent").c_str(), X_OK) == 0);
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-node-up"};
  konn::testsupport::EchoServer echo;

  SECTION("our agent with listeners, upstream server: one error, the normal direction works") {
    uint16_t agent_port = free_tcp_port();
    std::string sock = dir.file("up.sock");
    ProcessOptions so;
    so.binary = ub + "/server";
    so.args = {"--mode=grpc", "--uds-name=" + sock, "--delete-existing-uds-file",
               "--server-port=0", "--agent-bind-address=127.0.0.1",
               "--agent-port=" + std::to_string(agent_port), "--health-bind-address=127.0.0.1",
               "--health-port=" + std::to_string(free_tcp_port()),
               "--admin-bind-address=127.0.0.1",
               "--admin-port=" + std::to_string(free_tcp_port()),
               "--cluster-cert=" + certs.server_crt, "--cluster-key=" + certs.server_key,
               "--cluster-ca-cert=" + certs.ca_crt};
    so.log_path = dir.file("up-server.log");
    Process server(std::move(so));
    REQUIRE(server.wait_for_tcp_port(agent_port, 20s));
    uint16_t listen = free_tcp_port();
    AgentSpec spec;
    spec.extra_args = {"--health-server-port=0", "--admin-server-port=0",
                       "--node-to-control-plane-listen=127.0.0.1:" + std::to_string(listen)};
    auto agent = start_agent(dir, certs, agent_port, spec);
    REQUIRE(agent->wait_for_log("connected: servercount=1", 20s));
    CHECK(agent->wait_for_log("did not confirm node to control plane", 5s));
    Conn c(listen);
    REQUIRE(c.connected());
    CHECK(c.wait_closed(1s * kSlowFactor));
    // Tunnels towards the node through the upstream server.
    konn::testclient::ChannelConfig cc;
    cc.uds_path = sock;
    auto channel = konn::testclient::make_channel(cc);
    REQUIRE(channel->WaitForConnected(std::chrono::system_clock::now() + 10s));
    auto d = konn::testclient::Tunnel::dial(channel, echo.address(), 10s);
    INFO(server.log());
    REQUIRE(d.error.empty());
    REQUIRE(d.tunnel->write("through upstream"));
    CHECK(read_exactly(*d.tunnel, 16, 5s) == "through upstream");
    d.tunnel->close(5s);
    std::string log = agent->log();
    size_t first = log.find("did not confirm node to control plane");
    CHECK(log.find("did not confirm node to control plane", first + 1) == std::string::npos);
    // Upstream logs nothing about the header it ignores, and the stream stayed up.
    CHECK(server.running());
  }

  SECTION("upstream agent, our server with destinations: nothing changes for it") {
    ServerSpec spec;
    spec.extra_args = {"--node-to-control-plane-destinations=" + echo.address()};
    ServerProcess server(dir, certs, spec);
    server.start();
    ProcessOptions ao;
    ao.binary = ub + "/agent";
    ao.args = {"--proxy-server-host=127.0.0.1",
               "--proxy-server-port=" + std::to_string(server.agent_port()),
               "--ca-cert=" + certs.ca_crt, "--agent-cert=" + certs.agent_crt,
               "--agent-key=" + certs.agent_key, "--agent-id=up-agent",
               "--health-server-host=127.0.0.1",
               "--health-server-port=" + std::to_string(free_tcp_port()),
               "--admin-bind-address=127.0.0.1",
               "--admin-server-port=" + std::to_string(free_tcp_port())};
    ao.log_path = dir.file("up-agent.log");
    Process agent(std::move(ao));
    REQUIRE(server.wait_agent_connected("up-agent", 20s));
    std::string log = server.process().log();
    CHECK(log.find("nodeToControlPlane") == std::string::npos);
    auto channel = server.new_channel();
    REQUIRE(channel->WaitForConnected(std::chrono::system_clock::now() + 10s));
    for (int i = 0; i < 5; ++i) {
      auto d = konn::testclient::Tunnel::dial(channel, echo.address(), 10s);
      REQUIRE(d.error.empty());
      REQUIRE(d.tunnel->write("to upstream agent"));
      CHECK(read_exactly(*d.tunnel, 17, 5s) == "to upstream agent");
      d.tunnel->close(5s);
    }
    CHECK(agent.running());
    CHECK(agent.log().find("unrecognized") == std::string::npos);
  }
}
