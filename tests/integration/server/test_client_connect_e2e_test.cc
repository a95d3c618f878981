// proxy-test-client --mode=http-connect end to end: the real binary against a real proxy-server in
// --mode=http-connect (unix socket, and TCP with mutual TLS), a real agent and local origins. The
// client's output is checked byte for byte.
#include <fstream>
#include <sstream>

#include <asio.hpp>
#include <catch2/catch.hpp>

#include "tests/integration/tunnel/e2e_util.h"
#include "tests/integration/tunnel/tunnel_stack.h"

using namespace std::chrono_literals;
using konn::e2e::AgentSpec;
using konn::e2e::ServerProcess;
using konn::e2e::ServerSpec;
using konn::testsupport::Process;
using konn::testsupport::ProcessOptions;
using konn::testsupport::run_process;
using konn::testsupport::TempDir;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A proxy-server in http-connect mode (unix socket, or TCP+mTLS with `tcp`), one agent, an HTTP
// origin with /page and an echo origin. `half_close`: --http-connect-half-close.
struct ConnectClientStack {
  explicit ConnectClientStack(bool tcp, bool half_close = false)
      : certs(konn::testsupport::test_certs()),
        server(dir, certs,
               ServerSpec{tcp, true,
                          half_close ? std::vector<std::string>{"--mode=http-connect",
                                                                "--http-connect-half-close"}
                                     : std::vector<std::string>{"--mode=http-connect"}}),
        tcp_(tcp) {
    http.add_page("/page", "through CONNECT, byte for byte\n");
    server.start();
    agent = konn::e2e::start_agent(dir, certs, server.agent_port(), AgentSpec{});
    REQUIRE(server.wait_agent_connected("agent-1", 20s));
  }

  struct Run {
    int exit_code = -1;
    std::string out;  // stdout
    std::string err;  // stderr
  };
  // Runs proxy-test-client --mode=http-connect towards this stack's frontend, with `stdin_bytes`
  // on its stdin.
  Run client(std::vector<std::string> args, const std::string& stdin_bytes = {}) {
    int n = ++runs_;
    ProcessOptions o;
    o.binary = "proxy-test-client";
    o.args = {"--mode=http-connect"};
    if (tcp_) {
      o.args.insert(o.args.end(), {"--proxy-host=127.0.0.1",
                                   "--proxy-port=" + std::to_string(server.frontend_port()),
                                   "--ca-cert=" + certs.ca_crt, "--client-cert=" + certs.client_crt,
                                   "--client-key=" + certs.client_key});
    } else {
      o.args.push_back("--proxy-uds=" + server.uds_path());
    }
    o.args.insert(o.args.end(), args.begin(), args.end());
    o.stdout_path = dir.file("out-" + std::to_string(n));
    o.log_path = dir.file("err-" + std::to_string(n));
    o.stdin_path = dir.file("in-" + std::to_string(n));
    {
      std::ofstream in(o.stdin_path, std::ios::binary);
      in << stdin_bytes;
    }
    auto r = run_process(o, 30s);
    return {r.exit_code, slurp(o.stdout_path), slurp(o.log_path)};
  }

  std::vector<std::string> to(const std::string& address) const {
    auto colon = address.rfind(':');
    return {"--request-host=" + address.substr(0, colon),
            "--request-port=" + address.substr(colon + 1)};
  }

  TempDir dir{"konn-tcc"};
  const konn::testsupport::TestCerts& certs;
  konn::testsupport::HttpServer http;
  konn::testsupport::EchoServer echo{true};
  ServerProcess server;
  std::unique_ptr<Process> agent;

 private:
  bool tcp_;
  int runs_ = 0;
};

// What `request` gets from the origin at `address` directly (until it closes), for comparison.
std::string direct(const std::string& address, const std::string& request) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  auto colon = address.rfind(':');
  s.connect({asio::ip::make_address(address.substr(0, colon)),
             static_cast<uint16_t>(std::stoi(address.substr(colon + 1)))});
  asio::write(s, asio::buffer(request));
  std::string out;
  char buf[4096];
  std::error_code ec;
  while (!ec) out.append(buf, s.read_some(asio::buffer(buf), ec));
  return out;
}

uint16_t closed_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();  // closed when `a` goes away: nobody listens there
}

const std::string kGet = "GET /page HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n";

}  // namespace

TEST_CASE("test client http-connect over the unix socket: GET prints the body exactly",
          "[e2e][http-connect][testclient]") {
  ConnectClientStack st(false);
  auto args = st.to(st.http.address());
  args.push_back("--request-path=/page");
  auto r = st.client(args);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "through CONNECT, byte for byte\n");
  CHECK(r.err.empty());
}

TEST_CASE("test client http-connect over the unix socket: --pipe half-closes at stdin's EOF",
          "[e2e][http-connect][testclient]") {
  ConnectClientStack st(false, /*half_close=*/true);
  SECTION("the echo origin returns every byte, then closes after our EOF") {
    std::string input = konn::e2e::random_bytes(3 * 1024 * 1024 + 17, 5);
    auto args = st.to(st.echo.address());
    args.push_back("--pipe");
    auto r = st.client(args, input);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out.size() == input.size());
    CHECK((r.out == input));  // not printed: binary
    // The echo origin ends only after it read EOF: the half-close went all the way.
    CHECK(st.echo.digests().size() == 1);
  }
  SECTION("an HTTP exchange through the pipe is what the origin says directly") {
    auto args = st.to(st.http.address());
    args.push_back("--pipe");
    auto r = st.client(args, kGet);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out == direct(st.http.address(), kGet));
  }
}

TEST_CASE("test client http-connect over the unix socket: a refused dial exits 1 with the 502",
          "[e2e][http-connect][testclient]") {
  ConnectClientStack st(false);
  uint16_t port = closed_port();
  auto r = st.client({"--request-host=127.0.0.1", "--request-port=" + std::to_string(port)});
  CHECK(r.exit_code == 1);
  CHECK(r.out.empty());
  std::string target = "127.0.0.1:" + std::to_string(port);
  CHECK(r.err == "proxy-test-client: dial " + target +
                     " failed: HTTP/1.1 502 Bad Gateway: dial tcp " + target +
                     ": connect: connection refused\n");
}

TEST_CASE("test client http-connect over TCP with mTLS: GET, pipe and a refused dial",
          "[e2e][http-connect][testclient]") {
  ConnectClientStack st(true);
  SECTION("GET prints the body exactly") {
    auto args = st.to(st.http.address());
    args.push_back("--request-path=/page");
    auto r = st.client(args);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out == "through CONNECT, byte for byte\n");
    CHECK(r.err.empty());
  }
  SECTION("--pipe: the origin's answer, and the client exits when the origin closes") {
    auto args = st.to(st.http.address());
    args.push_back("--pipe");
    auto r = st.client(args, kGet);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out == direct(st.http.address(), kGet));
  }
  SECTION("a refused dial exits 1 with the 502 on stderr") {
    uint16_t port = closed_port();
    auto r = st.client({"--request-host=127.0.0.1", "--request-port=" + std::to_string(port)});
    CHECK(r.exit_code == 1);
    std::string target = "127.0.0.1:" + std::to_string(port);
    CHECK(r.err == "proxy-test-client: dial " + target +
                       " failed: HTTP/1.1 502 Bad Gateway: dial tcp " + target +
                       ": connect: connection refused\n");
  }
  SECTION("without a client certificate the TLS handshake fails: exit 1") {
    ProcessOptions o;
    o.binary = "proxy-test-client";
    o.args = {"--mode=http-connect",
              "--proxy-host=127.0.0.1",
              "--proxy-port=" + std::to_string(st.server.frontend_port()),
              "--ca-cert=" + st.certs.ca_crt,
              "--request-host=127.0.0.1",
              "--request-port=1"};
    auto r = run_process(o, 30s);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("failed: ") != std::string::npos);
  }
}
