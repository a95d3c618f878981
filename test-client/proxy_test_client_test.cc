// Runs the built proxy-test-client binary against the fake frontend.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "test-client/fake_connect_server.h"
#include "test-client/fake_proxy_service.h"
#include "tests/support/process_runner.h"
#include "tests/support/temp_dir.h"

using namespace konn::testsupport;
using konn::testclient::FakeProxyService;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ProcessOptions client(std::vector<std::string> args) {
  ProcessOptions o;
  o.binary = "proxy-test-client";
  o.args = std::move(args);
  return o;
}

}  // namespace

TEST_CASE("proxy-test-client: fetches a page and prints the body", "[testclient]") {
  TempDir dir{"konn-tc"};
  FakeProxyService fake(dir.file("p.sock"));
  auto o = client({"--proxy-uds=" + dir.file("p.sock"), "--request-host=http", "--request-port=80",
                   "--request-path=/x"});
  o.stdout_path = dir.file("out");
  RunResult r = run_process(std::move(o), 20s);
  CHECK(r.exit_code == 0);
  CHECK(slurp(dir.file("out")) == "hello from fake");
  INFO(r.output);
}

TEST_CASE("proxy-test-client: a dial error exits non-zero with the agent's text", "[testclient]") {
  TempDir dir{"konn-tc"};
  FakeProxyService fake(dir.file("p.sock"));
  RunResult r = run_process(
      client({"--proxy-uds=" + dir.file("p.sock"), "--request-host=refuse", "--request-port=9"}),
      20s);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("connect: connection refused") != std::string::npos);
}

TEST_CASE("proxy-test-client: --pipe copies stdin through the tunnel to stdout", "[testclient]") {
  TempDir dir{"konn-tc"};
  FakeProxyService fake(dir.file("p.sock"));
  std::string input(3 * 1024 * 1024 + 5, '\0');
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<char>(i * 13 + i / 7);
  {
    std::ofstream f(dir.file("in"), std::ios::binary);
    f << input;
  }
  auto o = client({"--proxy-uds=" + dir.file("p.sock"),
                   "--request-host=echoclose-" + std::to_string(input.size()), "--request-port=80",
                   "--pipe"});
  o.stdin_path = dir.file("in");
  o.stdout_path = dir.file("out");
  RunResult r = run_process(std::move(o), 30s);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  std::string out = slurp(dir.file("out"));
  CHECK(out.size() == input.size());
  CHECK((out == input));  // not printed: binary
}

TEST_CASE("proxy-test-client: bad flags exit 2 naming the flag", "[testclient]") {
  RunResult unknown = run_process(client({"--bogus-flag=1"}), 10s);
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.output.find("bogus-flag") != std::string::npos);
  RunResult bad = run_process(client({"--proxy-uds=/x", "--request-port=abc"}), 10s);
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("--request-port") != std::string::npos);
  RunResult help = run_process(client({"--help"}), 10s);
  CHECK(help.exit_code == 0);
  CHECK(help.output.find("--proxy-uds") != std::string::npos);
}

TEST_CASE("proxy-test-client --mode=http-connect: fetches a page over the unix socket", "[testclient]") {
  TempDir dir{"konn-tc"};
  konn::testclient::FakeConnectServer fake(dir.file("c.sock"));
  auto o = client({"--mode=http-connect", "--proxy-uds=" + dir.file("c.sock"),
                   "--request-host=http", "--request-port=80", "--request-path=/x"});
  o.stdout_path = dir.file("out");
  RunResult r = run_process(std::move(o), 20s);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(slurp(dir.file("out")) == "hello via connect");
  REQUIRE(fake.requests().size() == 1);
  CHECK(fake.requests()[0].target == "http:80");
}

TEST_CASE("proxy-test-client --mode=http-connect: a refused CONNECT exits 1 with status and body",
          "[testclient]") {
  TempDir dir{"konn-tc"};
  konn::testclient::FakeConnectServer fake(dir.file("c.sock"));
  RunResult r = run_process(client({"--mode=http-connect", "--proxy-uds=" + dir.file("c.sock"),
                                    "--request-host=refuse", "--request-port=9"}),
                            20s);
  CHECK(r.exit_code == 1);
  CHECK(r.output ==
        "proxy-test-client: dial refuse:9 failed: HTTP/1.1 502 Bad Gateway: dial tcp "
        "127.0.0.1:9: connect: connection refused\n");
}

TEST_CASE("proxy-test-client --mode=http-connect --pipe: stdin's EOF is a half-close", "[testclient]") {
  TempDir dir{"konn-tc"};
  konn::testclient::FakeConnectServer fake(dir.file("c.sock"));
  {
    std::ofstream f(dir.file("in"), std::ios::binary);
    f << std::string(1234567, 'z');
  }
  auto o = client({"--mode=http-connect", "--proxy-uds=" + dir.file("c.sock"),
                   "--request-host=sink", "--request-port=80", "--pipe"});
  o.stdin_path = dir.file("in");
  o.stdout_path = dir.file("out");
  RunResult r = run_process(std::move(o), 20s);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  // The fake answers with the byte count only after it saw the EOF.
  CHECK(slurp(dir.file("out")) == "1234567");
  CHECK(fake.half_closes() == 1);
}
