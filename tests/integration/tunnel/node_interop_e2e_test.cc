// Interop: an independent gRPC implementation (Node grpc-js) drives the frontend.
#include <fstream>
#include <sstream>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/integration/tunnel/tunnel_stack.h"
#include "tests/support/loopback.h"

using namespace konn::e2e;
using konn::testsupport::ProcessOptions;
using konn::testsupport::run_process;
using konn::testsupport::source_dir;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("e2e: an independent gRPC stack (Node grpc-js) fetches a page", "[e2e][node]") {
  KONN_REQUIRE_DAEMONS();
  const std::string node_dir = source_dir() + "/tests/node";
  if (access((node_dir + "/node_modules/@grpc/grpc-js").c_str(), R_OK) != 0) {
    FAIL("tests/node/node_modules is absent: run `npm ci` in tests/node (scripts/test.sh does)");
  }
  TunnelStack s;
  ProcessOptions o;
  o.binary = "node";
  o.search_path = true;
  o.args = {node_dir + "/fetch.js", s.server.uds_path(), s.http.address(), "/hello", "15000"};
  o.stdout_path = s.dir.file("node.out");
  auto r = run_process(std::move(o), 30s);
  std::string out = slurp(s.dir.file("node.out"));
  INFO("fetch.js stderr: " << r.output << "\nstdout: " << out);
  CHECK(r.exit_code == 0);
  CHECK(out.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(out.size() >= 25);
  CHECK(out.substr(out.size() - 25) == "hello through the tunnel\n");

  SECTION("and reports a dial error") {
    ProcessOptions refused;
    refused.binary = "node";
    refused.search_path = true;
    refused.args = {node_dir + "/fetch.js", s.server.uds_path(),
                    "127.0.0.1:" + std::to_string(konn::testsupport::free_tcp_port()), "/",
                    "15000"};
    auto rr = run_process(std::move(refused), 30s);
    INFO(rr.output);
    CHECK(rr.exit_code == 1);
    CHECK(rr.output.find("connection refused") != std::string::npos);
  }
}

TEST_CASE("e2e: konn half-close passes through the gRPC frontend (Node grpc-js client)",
          "[e2e][node][half-close]") {
  KONN_REQUIRE_DAEMONS();
  const std::string node_dir = source_dir() + "/tests/node";
  if (access((node_dir + "/node_modules/@grpc/grpc-js").c_str(), R_OK) != 0) {
    FAIL("tests/node/node_modules is absent: run `npm ci` in tests/node (scripts/test.sh does)");
  }
  TunnelStack s;
  ProcessOptions o;
  o.binary = "node";
  o.search_path = true;
  // 4 MiB: far more than is in flight when the client's EOF arrives, so an agent that closed the
  // whole connection on that EOF would lose the echo's tail.
  o.args = {node_dir + "/halfclose.js", s.server.uds_path(), s.echo.address(),
            std::to_string(4 << 20), "30000"};
  o.stdout_path = s.dir.file("node.out");
  auto r = run_process(std::move(o), 45s);
  std::string out = slurp(s.dir.file("node.out"));
  INFO("halfclose.js stderr: " << r.output << "\nstdout: " << out);
  REQUIRE(r.exit_code == 0);
  REQUIRE(out.rfind("ok 4194304 ", 0) == 0);
  std::string digest = out.substr(11, 64);
  // The echo server saw the client's EOF (the agent shut down its write side) and hashed exactly
  // what was sent.
  auto digests = s.echo.digests();
  REQUIRE(digests.size() == 1);
  CHECK(digests.front() == digest);
}
