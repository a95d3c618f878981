// proxy-server against the peers real users run (tests/go/README.md): kas-client dials the
// frontend exactly as kube-apiserver does (grpc-go, WithDialer, the socket path as :authority,
// one connection and one Proxy stream per request), and upstream-agent serves dials exactly as
// upstream's Go agent does (no konn flow control: it sends what its destination gives as fast as
// it gives it). Real processes and sockets only; the HTTP origin is tests/support's HttpServer.

#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <openssl/evp.h>

#include "tests/integration/tunnel/tunnel_stack.h"
#include "tests/support/process_runner.h"
#include "tests/support/sanitizers.h"

using namespace std::chrono_literals;
using konn::e2e::AgentSpec;
using konn::e2e::ServerProcess;
using konn::e2e::ServerSpec;
using konn::testsupport::Process;
using konn::testsupport::ProcessOptions;

namespace {

// Fails (never skips) when a binary is missing: the default build target builds all of them.
void require_built(const std::vector<std::string>& names) {
  for (const auto& n : names) {
    if (!Process::bin_exists(n)) {
      FAIL(n << " not built in " << konn::testsupport::bin_dir()
             << " (build the default target; the Go peers need scripts/setup.sh's packages)");
    }
  }
}

std::string hex(const unsigned char* md, unsigned int len) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += digits[md[i] >> 4];
    out += digits[md[i] & 15];
  }
  return out;
}

// SHA-256 of HttpServer's /bytes/<total> body.
std::string hex_sha256_of_pattern(uint64_t total) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  constexpr size_t kPiece = 1 << 20;
  for (uint64_t off = 0; off < total; off += kPiece) {
    std::string piece = konn::testsupport::HttpServer::pattern(
        off, static_cast<size_t>(std::min<uint64_t>(kPiece, total - off)));
    EVP_DigestUpdate(ctx, piece.data(), piece.size());
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  return hex(md, len);
}

std::string hex_sha256(const std::string& s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(s.data(), s.size(), md, &len, EVP_sha256(), nullptr);
  return hex(md, len);
}

// Peak resident set of process `pid` (VmHWM), in bytes; 0 when unreadable.
uint64_t peak_rss_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// One line of kas-client's output: {"status":200,"bytes":N,"sha256":"...","seconds":S}.
struct Fetch {
  int status = 0;
  uint64_t bytes = 0;
  std::string sha256;
};

std::vector<Fetch> parse_fetches(const std::string& out) {
  std::vector<Fetch> r;
  static const std::regex line(R"re(\{"status":(\d+),"bytes":(\d+),"sha256":"([0-9a-f]{64})")re");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it) {
    r.push_back(Fetch{std::stoi((*it)[1].str()), std::stoull((*it)[2].str()), (*it)[3].str()});
  }
  return r;
}

// The server, an HTTP origin and one agent: konn's proxy-agent or upstream-agent.
struct Peers {
  explicit Peers(ServerSpec spec, bool upstream_agent)
      : certs(konn::testsupport::test_certs()), server(dir, certs, std::move(spec)) {
    http.add_page("/hello", "hello through the tunnel\n");
    server.start();
    if (upstream_agent) {
      ProcessOptions o;
      o.binary = "upstream-agent";
      o.log_path = dir.file("upstream-agent.log");
      o.args = {"--addr=127.0.0.1:" + std::to_string(server.agent_port()),
                "--ca=" + certs.ca_crt,
                "--cert=" + certs.agent_crt,
                "--key=" + certs.agent_key,
                "--agent-id=upstream-1",
                "--identifiers=host=localhost"};
      agent = std::make_unique<Process>(std::move(o));
      agent_id = "upstream-1";
    } else {
      agent = konn::e2e::start_agent(dir, certs, server.agent_port(), AgentSpec{});
      agent_id = "agent-1";
    }
    if (!server.wait_agent_connected(agent_id, 20s)) {
      FAIL("agent did not connect; server log:\n"
           << server.process().log() << "\nagent log:\n"
           << agent->log());
    }
  }

  // Runs kas-client towards this server's frontend with `extra` flags; returns its result.
  konn::testsupport::RunResult kas_client(const std::vector<std::string>& extra,
                                          std::chrono::milliseconds timeout = 60s) const {
    ProcessOptions o;
    o.binary = "kas-client";
    if (server.frontend_port() == 0) {
      o.args = {"--uds=" + server.uds_path()};
    } else {
      o.args = {"--addr=127.0.0.1:" + std::to_string(server.frontend_port()),
                "--cert=" + certs.client_crt, "--key=" + certs.client_key, "--ca=" + certs.ca_crt};
    }
    o.args.insert(o.args.end(), extra.begin(), extra.end());
    return konn::testsupport::run_process(std::move(o), timeout);
  }

  std::string url(const std::string& path) const { return "http://" + http.address() + path; }

  std::string logs() {
    return "server log (tail):\n" + tail(server.process().log()) + "\nagent log (tail):\n" +
           tail(agent->log());
  }
  static std::string tail(const std::string& s) {
    return s.size() > 6000 ? s.substr(s.size() - 6000) : s;
  }

  konn::testsupport::TempDir dir{"konn-peers"};
  const konn::testsupport::TestCerts& certs;
  konn::testsupport::HttpServer http;
  ServerProcess server;
  std::unique_ptr<Process> agent;
  std::string agent_id;
};

// kas-client's GET /hello answered whole, `requests` times (one connection and stream each).
void expect_hello(Peers& p, const std::vector<std::string>& flags, int requests = 1) {
  std::vector<std::string> args = flags;
  args.push_back("--url=" + p.url("/hello"));
  args.push_back("--requests=" + std::to_string(requests));
  auto r = p.kas_client(args);
  std::string command = "kas-client";
  for (const auto& a : args) command += " " + a;
  INFO(command << "\noutput:\n" << r.output << "\n" << p.logs());
  REQUIRE(r.exit_code == 0);
  auto fetches = parse_fetches(r.output);
  REQUIRE(fetches.size() == static_cast<size_t>(requests));
  for (const auto& f : fetches) {
    CHECK(f.status == 200);
    CHECK(f.bytes == std::string("hello through the tunnel\n").size());
    CHECK(f.sha256 == hex_sha256("hello through the tunnel\n"));
  }
}

}  // namespace

TEST_CASE("kube-apiserver's dial over the unix socket: the socket path as :authority",
          "[e2e][peers]") {
  require_built({"proxy-server", "proxy-agent", "kas-client"});
  Peers p(ServerSpec{}, false);
  // grpc.Dial(<socket path>, WithDialer(unix), WithInsecure()): grpc-go sends the path itself
  // (with '/') as :authority, which strict HTTP/2 header validation refuses.
  expect_hello(p, {}, 3);
  CHECK(p.server.process().count_in_log("Invalid HTTP header field") == 0);
}

TEST_CASE("kube-apiserver's dial over the unix socket: other :authority values", "[e2e][peers]") {
  require_built({"proxy-server", "proxy-agent", "kas-client"});
  Peers p(ServerSpec{}, false);
  // What other clients and grpc-go versions send: unix:// targets give "localhost", some give
  // host:port or a percent-encoded path.
  SECTION("localhost") { expect_hello(p, {"--authority=localhost"}); }
  SECTION("host:port") { expect_hello(p, {"--authority=127.0.0.1:8131"}); }
  SECTION("percent-encoded path") {
    expect_hello(
        p, {"--authority=%2Fetc%2Fkubernetes%2Fkonnectivity-server%2Fkonnectivity-server.socket"});
  }
}

TEST_CASE("a grpc-go client with an empty :authority over the unix socket", "[e2e][peers]") {
  require_built({"proxy-server", "proxy-agent", "kas-client"});
  Peers p(ServerSpec{}, false);
  // grpc.Dial("", WithDialer(unix), WithInsecure()): grpc-go 1.33 sends an empty :authority.
  // kube-apiserver never dials an empty target; grpc-go's own server accepts it.
  expect_hello(p, {"--dial-target="});
}

TEST_CASE("kube-apiserver's dial over TCP with mutual TLS: host:port as :authority",
          "[e2e][peers]") {
  require_built({"proxy-server", "proxy-agent", "kas-client"});
  Peers p(ServerSpec{true, true, {}}, false);
  expect_hello(p, {}, 2);
}

TEST_CASE("upstream's agent: dial, data both ways and close through proxy-server", "[e2e][peers]") {
  require_built({"proxy-server", "upstream-agent", "kas-client"});
  Peers p(ServerSpec{}, true);
  expect_hello(p, {"--authority=localhost"}, 2);
  // Every tunnel ended with CLOSE_REQ/CLOSE_RSP at the agent: none is left open.
  CHECK(konn::testsupport::eventually(
      [&] { return p.agent->count_in_log("close connectID=") >= 2; }, 10s));
  CHECK(p.agent->running());
}

TEST_CASE("upstream's agent: 256 MiB to a client that reads slower than the destination writes",
          "[e2e][peers]") {
  require_built({"proxy-server", "upstream-agent", "kas-client"});
  Peers p(ServerSpec{}, true);
  // upstream-agent has no konn window: it reads the origin as fast as loopback allows (GB/s)
  // and sends DATA as fast as the agent stream takes it. The client reads 16 MiB/s, so the
  // server must hold the agent back (HTTP/2 flow control on the agent stream) instead of
  // buffering without bound or cutting the tunnel when its per-tunnel cap
  // (--xfr-channel-size x 1 MiB) fills.
  // Sanitizer builds move 32 MiB: still three times the per-tunnel cap.
  constexpr uint64_t kTotal = konn::testsupport::scaled_bytes(256ull << 20);
  const std::string want = hex_sha256_of_pattern(kTotal);
  auto start = std::chrono::steady_clock::now();
  auto r = p.kas_client(
      {"--url=" + p.url("/bytes/" + std::to_string(kTotal)), "--authority=localhost",
       "--read-rate=" + std::to_string(16 << 20), "--read-chunk=65536", "--timeout=150s"},
      170s);
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("kas-client output:\n" << r.output << "\n" << p.logs() << "\nseconds: " << secs);
  REQUIRE(r.exit_code == 0);
  auto fetches = parse_fetches(r.output);
  REQUIRE(fetches.size() == 1);
  CHECK(fetches[0].status == 200);
  CHECK(fetches[0].bytes == kTotal);
  CHECK(fetches[0].sha256 == want);
  CHECK(p.server.process().count_in_log("stopped reading") == 0);
  // Held back, not buffered: the server's peak memory stays far below the 256 MiB that went
  // through it (the per-tunnel cap is 10 MiB, the HTTP/2 windows a few MiB more).
  uint64_t peak = peak_rss_bytes(p.server.process().pid());
  WARN("proxy-server peak RSS " << peak / (1 << 20) << " MiB; download " << secs << " s");
  CHECK(peak > 0);
  if (!konn::testsupport::kSanitizerBuild) CHECK(peak < (96ull << 20));
  // The agent stream survived: the agent still runs and a new tunnel works.
  CHECK(p.agent->running());
  expect_hello(p, {"--authority=localhost"});
}
