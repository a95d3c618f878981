// --enable-profiling / --enable-contention-profiling on the built daemons: the admin port serves
// a CPU profile taken in-process while the daemon relays bytes, heap statistics, and 501 for the
// contention paths; without the flag those paths are 404.
#include <atomic>
#include <future>
#include <regex>
#include <sstream>
#include <thread>

#include <asio/connect.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/profiling/heap_stats.h"
#include "test-client/tunnel.h"
#include "tests/integration/tunnel/tunnel_stack.h"
#include "tests/support/http_get.h"

using namespace std::chrono_literals;

namespace {

using konn::testsupport::http_get_local;

// The port of the daemon's admin listener, from its start-up log line.
uint16_t admin_port_of(konn::testsupport::Process& p) {
  // The whole line: the log may be read while the port is half written.
  const std::regex line("admin listening on [^ ]*:([0-9]+)\n");
  auto until = std::chrono::steady_clock::now() + 20s;
  std::smatch m;
  std::string log;
  while (!std::regex_search(log = p.log(), m, line)) {
    REQUIRE(std::chrono::steady_clock::now() < until);
    std::this_thread::sleep_for(20ms);
  }
  return static_cast<uint16_t>(std::stoi(m[1]));
}

// Lines of a folded-stacks profile that name a konn function, and the samples of all lines.
std::pair<size_t, size_t> konn_lines_and_samples(const std::string& folded) {
  size_t konn = 0, samples = 0;
  std::istringstream lines(folded);
  for (std::string line; std::getline(lines, line);) {
    auto space = line.rfind(' ');
    REQUIRE(space != std::string::npos);
    samples += std::stoul(line.substr(space + 1));
    if (line.find("konn::") != std::string::npos) ++konn;
  }
  return {konn, samples};
}

}  // namespace

TEST_CASE("with --enable-profiling the admin port serves a CPU profile of the working daemon",
          "[e2e][profiling]") {
  konn::e2e::ServerSpec server_spec;
  server_spec.extra_args = {"--enable-profiling", "--enable-contention-profiling"};
  konn::e2e::AgentSpec agent_spec;
  agent_spec.extra_args = {"--enable-profiling", "--admin-server-port=0", "--health-server-port=0"};
  konn::e2e::TunnelStack stack(server_spec, agent_spec);
  auto& server_log = stack.server.process();
  CHECK(
      server_log.wait_for_log("--enable-contention-profiling: konn has no lock-contention "
                              "profile",
                              5s));
  uint16_t server_admin = admin_port_of(server_log);
  uint16_t agent_admin = admin_port_of(*stack.agent);
  CHECK(http_get_local(server_admin, "/debug/pprof/").body.find("/debug/pprof/profile") !=
        std::string::npos);

  // Bytes through the tunnel while both daemons are profiled for two seconds.
  std::atomic<bool> stop{false};
  std::atomic<size_t> echoed{0};
  std::thread traffic([&] {
    auto d = konn::testclient::Tunnel::dial(stack.channel, stack.echo.address(), 10s);
    if (!d.tunnel) return;
    std::string chunk(64 * 1024, 'p');
    while (!stop) {
      if (!d.tunnel->write(chunk)) break;
      size_t got = 0;
      while (got < chunk.size()) {
        std::string piece;
        if (d.tunnel->read_for(&piece, 5s) != konn::testclient::ByteStream::ReadStatus::Data)
          return;
        got += piece.size();
      }
      echoed += got;
    }
    d.tunnel->close();
  });
  auto agent_profile = std::async(
      std::launch::async,
      [&] { return http_get_local(agent_admin, "/debug/pprof/profile?seconds=2"); });
  auto server_profile = http_get_local(server_admin, "/debug/pprof/profile?seconds=2");
  auto agent_reply = agent_profile.get();
  stop = true;
  traffic.join();
  CHECK(echoed > 0);
  for (auto* reply : {&server_profile, &agent_reply}) {
    REQUIRE(reply->status == 200);
    INFO(reply->body.substr(0, 3000));
    auto [konn, samples] = konn_lines_and_samples(reply->body);
    CHECK(samples >= 3);  // ~10 per second seen while echoing 64 KiB chunks
    CHECK(konn >= 1);
  }

  auto heap = http_get_local(server_admin, "/debug/pprof/heap");
  REQUIRE(heap.status == 200);
  auto doc = nlohmann::json::parse(heap.body);
  CHECK(doc["allocator"] == konn::core::profiling::kAllocator);
  CHECK(doc["in_use_bytes"].get<uint64_t>() > 0);
  CHECK(doc["rss_bytes"].get<uint64_t>() > 0);
  auto block = http_get_local(server_admin, "/debug/pprof/block");
  CHECK(block.status == 501);
  CHECK(block.body.find("no lock-contention profile") != std::string::npos);
  CHECK(http_get_local(agent_admin, "/debug/pprof/heap").status == 200);
}

TEST_CASE("without --enable-profiling the /debug/pprof paths are 404", "[e2e][profiling]") {
  konn::e2e::AgentSpec agent_spec;
  agent_spec.extra_args = {"--admin-server-port=0", "--health-server-port=0"};
  konn::e2e::TunnelStack stack({}, agent_spec);
  uint16_t server_admin = admin_port_of(stack.server.process());
  uint16_t agent_admin = admin_port_of(*stack.agent);
  for (uint16_t port : {server_admin, agent_admin}) {
    CHECK(http_get_local(port, "/metrics").status == 200);
    for (const char* path : {"/debug/pprof/", "/debug/pprof/profile?seconds=1", "/debug/pprof/heap",
                             "/debug/pprof/block"}) {
      INFO(port << path);
      CHECK(http_get_local(port, path).status == 404);
    }
  }
  CHECK(stack.server.process().log().find("contention") == std::string::npos);
}
