// socks5 and kubeproxy-http dialling through a Konnectivity proxy-server (both frontend modes):
// real processes (proxy-server, proxy-agent, socks5, kubeproxy-http, the TLS fake apiserver) and
// real clients (curl --socks5-hostname, curl -p, kubectl with proxy-url), plus a raw SOCKS5 client
// for reply codes and byte-exact echo.

#include <fstream>
#include <random>
#include <regex>

#include <asio/connect.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include "tests/integration/tunnel/tunnel_stack.h"
#include "tests/support/loopback.h"
#include "tests/support/prom_text.h"

using namespace std::chrono_literals;
using konn::e2e::AgentSpec;
using konn::e2e::ServerProcess;
using konn::e2e::ServerSpec;
using konn::testsupport::Process;
using konn::testsupport::ProcessOptions;

namespace {

// The first number captured by `re` in the process log, once it appears.
uint16_t port_in_log(const Process& p, const std::string& needle, const std::regex& re) {
  if (!p.wait_for_log(needle, 20s)) return 0;
  std::smatch m;
  std::string log = p.log();
  if (!std::regex_search(log, m, re)) return 0;
  return static_cast<uint16_t>(std::stoi(m[1].str()));
}

// proxy-server (frontend on a unix socket, in `mode`), one agent, and local origins. In
// http-connect mode the server passes a client's EOF on as a half-close
// (--http-connect-half-close), as gRPC mode does for clients that ask: the relays below send
// their EOF and then read the echo's tail.
struct Stack {
  // `tcp`: the frontend on TCP with mutual TLS instead of the unix socket. `with_agent` false:
  // a proxy-server no agent ever connected to.
  explicit Stack(const std::string& frontend_mode, bool tcp = false, bool with_agent = true)
      : mode(frontend_mode),
        certs(konn::testsupport::test_certs()),
        server(dir, certs,
               frontend_mode == "grpc" ? ServerSpec{tcp, true, {}}
                                       : ServerSpec{tcp,
                                                    true,
                                                    {"--mode=http-connect",
                                                     "--http-connect-half-close"}}) {
    http.add_page("/hello", "hello through the tunnel\n");
    server.start();
    if (!with_agent) return;
    agent = konn::e2e::start_agent(dir, certs, server.agent_port(), AgentSpec{});
    if (!server.wait_agent_connected("agent-1", 20s)) {
      FAIL("agent did not connect; server log:\n" << server.process().log());
    }
  }

  std::vector<std::string> upstream_flags() const {
    std::vector<std::string> f{"--konnectivity-mode=" + mode, "--konnectivity-dial-timeout=10s"};
    if (server.frontend_port() == 0) {
      f.push_back("--konnectivity-address=unix:" + server.uds_path());
    } else {
      // kube-apiserver's client certificate; the server's certificate names 127.0.0.1.
      f.push_back("--konnectivity-address=127.0.0.1:" + std::to_string(server.frontend_port()));
      f.push_back("--konnectivity-ca-cert=" + certs.ca_crt);
      f.push_back("--konnectivity-client-cert=" + certs.client_crt);
      f.push_back("--konnectivity-client-key=" + certs.client_key);
    }
    return f;
  }

  std::string mode;
  konn::testsupport::TempDir dir{"konn-up"};
  const konn::testsupport::TestCerts& certs;
  konn::testsupport::HttpServer http;
  konn::testsupport::EchoServer echo{true};
  ServerProcess server;
  std::unique_ptr<Process> agent;
};

struct Socks5 {
  Socks5(Stack& s, std::vector<std::string> extra = {}) {
    ProcessOptions o;
    o.binary = "socks5";
    o.log_path = s.dir.file("socks5.log");
    o.args = {"--bind-address=127.0.0.1", "--port=0", "--health-port=0",
              "--health-bind-address=127.0.0.1", "--workers=2",
              // A name resolved here would fail: success proves the agent resolved it.
              "--dns-servers=127.0.0.1:1", "--dns-timeout=200ms"};
    auto up = s.upstream_flags();
    o.args.insert(o.args.end(), up.begin(), up.end());
    o.args.insert(o.args.end(), extra.begin(), extra.end());
    proc = std::make_unique<Process>(std::move(o));
    port = port_in_log(*proc, "health listening",
                       std::regex("listening on 127\\.0\\.0\\.1:([0-9]+) \\("));
    health =
        port_in_log(*proc, "health listening", std::regex("health listening on [^:]*:([0-9]+)"));
    if (port == 0 || health == 0) FAIL("socks5 did not start:\n" << proc->log());
  }
  std::string proxy() const { return "127.0.0.1:" + std::to_string(port); }
  std::unique_ptr<Process> proc;
  uint16_t port = 0;
  uint16_t health = 0;
};

konn::testsupport::RunResult curl(std::vector<std::string> args) {
  ProcessOptions o;
  o.binary = "curl";
  o.search_path = true;
  o.args = {"-sS", "--max-time", "20"};
  o.args.insert(o.args.end(), args.begin(), args.end());
  return konn::testsupport::run_process(std::move(o), 30s);
}

std::string scrape(uint16_t port, const std::string& path) {
  auto r = curl({"-i", "http://127.0.0.1:" + std::to_string(port) + path});
  return r.output;
}

// The body of /metrics.
std::string metrics_of(uint16_t port) {
  return curl({"http://127.0.0.1:" + std::to_string(port) + "/metrics"}).output;
}

// The value of one sample ("name{labels}" as exposed) in a /metrics body, or -1.
double sample(const std::string& metrics, const std::string& series) {
  return konn::testsupport::parse_prometheus_text(metrics).value_of(series).value_or(-1);
}

// A minimal blocking SOCKS5 client: no auth, CONNECT (or another command) to a domain name.
struct SocksClient {
  asio::io_context io;
  asio::ip::tcp::socket s{io};
  explicit SocksClient(uint16_t port) { s.connect({asio::ip::make_address("127.0.0.1"), port}); }
  // Returns the REP byte (or -1 when the connection ended).
  int request(const std::string& host, uint16_t port, uint8_t cmd = 1) {
    std::vector<uint8_t> greet{5, 1, 0};
    asio::write(s, asio::buffer(greet));
    std::array<uint8_t, 2> sel{};
    asio::read(s, asio::buffer(sel));
    if (sel[1] != 0) return -1;
    std::vector<uint8_t> req{5, cmd, 0, 3, static_cast<uint8_t>(host.size())};
    req.insert(req.end(), host.begin(), host.end());
    req.push_back(static_cast<uint8_t>(port >> 8));
    req.push_back(static_cast<uint8_t>(port & 0xff));
    asio::write(s, asio::buffer(req));
    std::array<uint8_t, 10> rep{};  // IPv4 BND (also what failures carry)
    std::error_code ec;
    asio::read(s, asio::buffer(rep), ec);
    if (ec) return -1;
    bnd_port = static_cast<uint16_t>(rep[8] << 8 | rep[9]);
    atyp = rep[3];
    return rep[1];
  }
  uint16_t bnd_port = 0;
  uint8_t atyp = 0;
};

std::string random_bytes(size_t n) {
  std::mt19937_64 rng(42);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

}  // namespace

TEST_CASE("socks5 through Konnectivity: curl --socks5-hostname reaches an origin behind the agent",
          "[e2e][upstream][socks5]") {
  REQUIRE(Process::bin_exists("socks5"));
  std::string mode = GENERATE(std::string("grpc"), std::string("http-connect"));
  bool tcp = GENERATE(false, true);
  INFO("mode " << mode << (tcp ? " over TCP+mTLS" : " over a unix socket"));
  Stack stack(mode, tcp);
  Socks5 socks(stack);
  // "localhost" goes to the agent unresolved (socks5's own DNS points nowhere).
  std::string url = "http://localhost:" + std::to_string(stack.http.port()) + "/hello";
  auto r = curl({"--socks5-hostname", socks.proxy(), url});
  INFO(r.output << "\nsocks5 log:\n" << socks.proc->log());
  CHECK(r.exit_code == 0);
  CHECK(r.output == "hello through the tunnel\n");
  CHECK(stack.http.requests() >= 1);

  // Byte-exact both ways, larger than every buffer on the way (backpressure through the tunnel).
  SocksClient c(socks.port);
  REQUIRE(c.request("localhost", stack.echo.port()) == 0);
  CHECK(c.atyp == 1);  // BND is 0.0.0.0:0: the agent's address is not carried by the protocol
  CHECK(c.bnd_port == 0);
  std::string payload = random_bytes(8 * 1024 * 1024);
  std::thread writer([&] {
    std::error_code ec;
    asio::write(c.s, asio::buffer(payload), ec);
    c.s.shutdown(asio::socket_base::shutdown_send, ec);
  });
  std::string back(payload.size(), '\0');
  std::error_code ec;
  size_t n = asio::read(c.s, asio::buffer(back), ec);
  writer.join();
  CHECK(n == payload.size());
  CHECK((back == payload));
}

// reliability: socks5 | CONNECT through Konnectivity to a closed port (both frontend modes) | reply
// reliability+: `05` | info close line with "connection refused" | socks5
// reliability: socks5 | BIND or UDP ASSOCIATE with the Konnectivity upstream | reply `07` | info
// reliability+: "close ... reason="BIND is not possible through the Konnectivity upstream"" |
// reliability+: socks5
TEST_CASE("socks5 through Konnectivity: reply codes for a refused destination, BIND and UDP",
          "[e2e][upstream][socks5]") {
  REQUIRE(Process::bin_exists("socks5"));
  std::string mode = GENERATE(std::string("grpc"), std::string("http-connect"));
  INFO("mode " << mode);
  Stack stack(mode);
  Socks5 socks(stack);
  uint16_t closed = konn::testsupport::free_tcp_port();
  {
    SocksClient c(socks.port);
    CHECK(c.request("127.0.0.1", closed) == 0x05);  // the agent's "connection refused"
  }
  {
    SocksClient c(socks.port);
    CHECK(c.request("127.0.0.1", 80, 2) == 0x07);  // BIND: not possible through Konnectivity
  }
  {
    SocksClient c(socks.port);
    CHECK(c.request("127.0.0.1", 0, 3) == 0x07);  // UDP ASSOCIATE: neither
  }
  CHECK(socks.proc->wait_for_log("connection refused", 5s));
}

TEST_CASE("socks5 through Konnectivity: no agent gets 04, a proxy-server that is down gets 01",
          "[e2e][upstream][socks5]") {
  REQUIRE(Process::bin_exists("socks5"));
  std::string mode = GENERATE(std::string("grpc"), std::string("http-connect"));
  INFO("mode " << mode);
  Stack stack(mode, false, /*with_agent=*/false);
  Socks5 socks(stack);
  {
    // The proxy-server answers "No agent available": no agent can reach that host (README).
    SocksClient c(socks.port);
    CHECK(c.request("localhost", stack.echo.port()) == 0x04);
  }
  CHECK(socks.proc->wait_for_log("No agent available", 5s));
  stack.server.kill();
  {
    SocksClient c(socks.port);
    auto start = std::chrono::steady_clock::now();
    CHECK(c.request("localhost", stack.echo.port()) == 0x01);
    // Well before the 10 s dial timeout: an unreachable proxy-server is not a timeout.
    CHECK(std::chrono::steady_clock::now() - start < 5s);
  }
  std::string m;
  CHECK(konn::testsupport::eventually(
      [&] {
        m = metrics_of(socks.health);
        return sample(m, "konn_socks5_sessions_active") == 0;
      },
      5s));
  INFO(m << "\nsocks5 log:\n" << socks.proc->log());
  CHECK(
      sample(m, R"(konn_socks5_dial_failures_total{reason="no_agent",upstream="konnectivity"})") ==
      1);
  CHECK(
      sample(
          m,
          R"(konn_socks5_dial_failures_total{reason="proxy_unavailable",upstream="konnectivity"})") ==
      1);
  CHECK(sample(m, R"(konn_socks5_replies_total{code="04"})") == 1);
  CHECK(sample(m, R"(konn_socks5_replies_total{code="01"})") == 1);
}

TEST_CASE("socks5 with open Konnectivity tunnels shuts down cleanly on SIGTERM",
          "[e2e][upstream][socks5]") {
  REQUIRE(Process::bin_exists("socks5"));
  std::string mode = GENERATE(std::string("grpc"), std::string("http-connect"));
  INFO("mode " << mode);
  Stack stack(mode);
  Socks5 socks(stack, {"--graceful-shutdown-timeout=500ms"});
  std::vector<std::unique_ptr<SocksClient>> open;
  for (int i = 0; i < 3; ++i) {
    open.push_back(std::make_unique<SocksClient>(socks.port));
    REQUIRE(open.back()->request("localhost", stack.echo.port()) == 0);
    std::string ping = "ping";
    asio::write(open.back()->s, asio::buffer(ping));
    std::string pong(4, '\0');
    asio::read(open.back()->s, asio::buffer(pong));
    CHECK(pong == "ping");
  }
  auto start = std::chrono::steady_clock::now();
  int status = socks.proc->terminate(10s);
  INFO(socks.proc->log());
  CHECK(status == 0);
  CHECK(std::chrono::steady_clock::now() - start < 8s);
  // Every client saw its session end.
  for (auto& c : open) {
    std::array<char, 16> buf{};
    std::error_code ec;
    c->s.read_some(asio::buffer(buf), ec);
    CHECK(ec);
  }
}

// reliability: socks5 | proxy-server killed | /readyz 503 "[-]konnectivity failed" | nothing |
// reliability+: socks5, /healthz
TEST_CASE("socks5 health and metrics listeners, with the Konnectivity upstream",
          "[e2e][upstream][socks5][metrics]") {
  REQUIRE(Process::bin_exists("socks5"));
  Stack stack("grpc");
  Socks5 socks(stack);
  CHECK(scrape(socks.health, "/healthz").find("200 OK") != std::string::npos);
  auto ready = scrape(socks.health, "/readyz?verbose");
  INFO(ready);
  CHECK(ready.find("200 OK") != std::string::npos);
  CHECK(ready.find("[+]konnectivity ok") != std::string::npos);

  auto before = metrics_of(socks.health);
  CHECK(sample(before, "konn_socks5_sessions_active") == 0);
  std::string url = "http://localhost:" + std::to_string(stack.http.port()) + "/hello";
  for (int i = 0; i < 3; ++i) {
    auto r = curl({"--socks5-hostname", socks.proxy(), url});
    CHECK(r.exit_code == 0);
  }
  {
    SocksClient c(socks.port);
    CHECK(c.request("127.0.0.1", konn::testsupport::free_tcp_port()) == 0x05);
  }
  std::string m;
  // The last session's close is counted just after its client saw the end.
  CHECK(konn::testsupport::eventually(
      [&] {
        m = metrics_of(socks.health);
        return sample(m, "konn_socks5_sessions_total") >= 4 &&
               sample(m, "konn_socks5_sessions_active") == 0;
      },
      5s));
  INFO(m);
  CHECK(sample(m, "konn_socks5_requests_total{command=\"CONNECT\"}") >= 4);
  CHECK(sample(m, "konn_socks5_replies_total{code=\"00\"}") >= 3);
  CHECK(sample(m, "konn_socks5_replies_total{code=\"05\"}") == 1);
  CHECK(sample(m, "konn_socks5_bytes_total{direction=\"up\"}") > 0);
  CHECK(sample(m, "konn_socks5_bytes_total{direction=\"down\"}") >=
        3 * std::string("hello through the tunnel\n").size());
  CHECK(
      sample(m, "konn_socks5_dial_failures_total{reason=\"refused\",upstream=\"konnectivity\"}") ==
      1);

  // Without the proxy-server, socks5 is not ready and says why.
  stack.server.kill();
  auto down = scrape(socks.health, "/readyz?verbose");
  INFO(down);
  CHECK(down.find("503") != std::string::npos);
  CHECK(down.find("[-]konnectivity failed") != std::string::npos);
}

// reliability: kubeproxy-http | CONNECT through Konnectivity to a closed port | `HTTP/1.1 502`
// reliability+: "connect: connection refused" | info "...: CONNECT ... through Konnectivity: ...
// reliability+: connection refused" | kubeproxy-http, /readyz ok
TEST_CASE("kubeproxy-http CONNECT mode through Konnectivity: curl and kubectl",
          "[e2e][upstream][kubeproxy]") {
  REQUIRE(Process::bin_exists("kubeproxy-http"));
  std::string mode = GENERATE(std::string("grpc"), std::string("http-connect"));
  INFO("mode " << mode);
  Stack stack(mode);
  ProcessOptions ao;
  ao.binary = "kubeproxy-fake-apiserver";
  ao.log_path = stack.dir.file("apiserver.log");
  ao.args = {"--cert", stack.certs.server_crt, "--key", stack.certs.server_key, "--token",
             "s3cret"};
  Process api(std::move(ao));
  uint16_t api_port =
      port_in_log(api, "listening on", std::regex("listening on 127\\.0\\.0\\.1:([0-9]+)"));
  REQUIRE(api_port != 0);

  ProcessOptions ko;
  ko.binary = "kubeproxy-http";
  ko.log_path = stack.dir.file("kubeproxy.log");
  ko.args = {"--mode=connect", "--port=0", "--health-port=0", "--health-bind-address=127.0.0.1",
             "--access-log"};
  auto up = stack.upstream_flags();
  ko.args.insert(ko.args.end(), up.begin(), up.end());
  Process kp(std::move(ko));
  uint16_t port = port_in_log(kp, "health listening",
                              std::regex("Starting to serve on 127\\.0\\.0\\.1:([0-9]+)"));
  uint16_t health =
      port_in_log(kp, "health listening", std::regex("health listening on [^:]*:([0-9]+)"));
  REQUIRE(port != 0);
  REQUIRE(health != 0);
  std::string proxy = "http://127.0.0.1:" + std::to_string(port);
  std::string api_url = "https://127.0.0.1:" + std::to_string(api_port) + "/api";

  // HTTPS_PROXY, as a user sets it for a remote apiserver.
  ProcessOptions co;
  co.binary = "curl";
  co.search_path = true;
  co.args = {"-sS",
             "--max-time",
             "20",
             "--cacert",
             stack.certs.ca_crt,
             "-H",
             "Authorization: Bearer s3cret",
             api_url};
  co.env = {{"HTTPS_PROXY", proxy}, {"NO_PROXY", ""}, {"no_proxy", ""}};
  auto r = konn::testsupport::run_process(co, 30s);
  INFO(r.output << "\nkubeproxy log:\n" << kp.log());
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("APIVersions") != std::string::npos);

  // kubectl ignores HTTPS_PROXY for loopback: proxy-url on the cluster.
  std::string cfg = stack.dir.file("kubeconfig");
  std::ofstream(cfg) << "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n"
                        "    server: https://127.0.0.1:"
                     << api_port << "\n    certificate-authority: " << stack.certs.ca_crt
                     << "\n    proxy-url: " << proxy
                     << "\nusers:\n- name: u\n  user:\n    token: s3cret\n"
                        "contexts:\n- name: fake\n  context: {cluster: fake, user: u}\n"
                        "current-context: fake\n";
  ProcessOptions ko2;
  ko2.binary = "kubectl";
  ko2.search_path = true;
  ko2.args = {"--kubeconfig=" + cfg, "get", "--raw", "/api"};
  auto k = konn::testsupport::run_process(ko2, 60s);
  INFO(k.output);
  CHECK(k.exit_code == 0);
  CHECK(k.output.find("APIVersions") != std::string::npos);
  CHECK(kp.wait_for_log("CONNECT 127.0.0.1:" + std::to_string(api_port) + "\" 200", 5s));

  // A refused destination behind the agent: 502 with the agent's reason.
  uint16_t closed = konn::testsupport::free_tcp_port();
  auto refused =
      curl({"-i", "-p", "-x", proxy, "http://127.0.0.1:" + std::to_string(closed) + "/"});
  CHECK(refused.output.find("502") != std::string::npos);
  // curl does not show a refused CONNECT's body; the log line carries the agent's reason.
  CHECK(kp.wait_for_log("connection refused", 5s));
  // The body itself, seen by a raw client.
  {
    asio::io_context io;
    asio::ip::tcp::socket s(io);
    s.connect({asio::ip::make_address("127.0.0.1"), port});
    std::string req =
        "CONNECT 127.0.0.1:" + std::to_string(closed) + " HTTP/1.1\r\nHost: x\r\n\r\n";
    asio::write(s, asio::buffer(req));
    std::string answer;
    std::error_code ec;
    asio::read(s, asio::dynamic_buffer(answer), ec);  // until the proxy closes
    CHECK(answer.rfind("HTTP/1.1 502", 0) == 0);
    CHECK(answer.find("connect: connection refused") != std::string::npos);
  }

  std::string m;
  CHECK(konn::testsupport::eventually(
      [&] {
        m = metrics_of(health);
        return sample(m, "konn_kubeproxy_connections_active") == 0 &&
               sample(m, "konn_kubeproxy_responses_total{code=\"200\"}") >= 2;
      },
      5s));
  INFO(m);
  CHECK(sample(m, "konn_kubeproxy_requests_total{mode=\"connect\"}") >= 3);
  CHECK(sample(m, "konn_kubeproxy_responses_total{code=\"502\"}") == 2);
  CHECK(sample(m, "konn_kubeproxy_bytes_total{direction=\"down\"}") > 0);
  CHECK(
      sample(m,
             "konn_kubeproxy_dial_failures_total{reason=\"refused\",upstream=\"konnectivity\"}") ==
      2);
  auto ready = scrape(health, "/readyz?verbose");
  CHECK(ready.find("[+]konnectivity ok") != std::string::npos);
}
