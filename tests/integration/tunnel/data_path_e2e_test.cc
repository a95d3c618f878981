// End-to-end data path: pages, bulk transfer, many tunnels, head-of-line isolation.
#include <atomic>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>

#include "test-client/channel.h"
#include "test-client/http_get.h"
#include "test-client/tunnel.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/integration/tunnel/e2e_util.h"
#include "tests/integration/tunnel/tunnel_stack.h"
#include "tests/support/sanitizers.h"

using namespace konn::e2e;
using konn::testclient::http_get;
using konn::testclient::Tunnel;
using konn::testsupport::eventually;
using konn::testsupport::HttpServer;
using konn::testsupport::kSlowFactor;
using konn::testsupport::ProcessOptions;
using konn::testsupport::run_process;
using konn::testsupport::scaled_bytes;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE("e2e: fetch a page through the unix-socket frontend", "[e2e]") {
  KONN_REQUIRE_DAEMONS();
  TunnelStack s;
  auto d = Tunnel::dial(s.channel, s.http.address(), 5s);
  REQUIRE(d.error.empty());
  auto r = http_get(*d.tunnel, s.http.address(), "/hello", 10s);
  CHECK(r.error.empty());
  CHECK(r.code == 200);
  CHECK(r.body == "hello through the tunnel\n");
  CHECK(d.tunnel->close(5s) == "");

  SECTION("and with the proxy-test-client binary") {
    ProcessOptions o;
    o.binary = "proxy-test-client";
    o.args = {"--proxy-uds=" + s.server.uds_path(), "--request-host=127.0.0.1",
              "--request-port=" + std::to_string(s.http.port()), "--request-path=/hello"};
    o.stdout_path = s.dir.file("client.out");
    auto res = run_process(std::move(o), 20s);
    INFO(res.output);
    CHECK(res.exit_code == 0);
    std::ifstream in(s.dir.file("client.out"));
    std::stringstream body;
    body << in.rdbuf();
    CHECK(body.str() == "hello through the tunnel\n");

    // --pipe: the request goes in on stdin; the origin closes after its answer (no half-close
    // in the protocol), which ends the tunnel and the client.
    {
      std::ofstream req(s.dir.file("pipe.in"), std::ios::binary);
      req << "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    }
    ProcessOptions pipe;
    pipe.binary = "proxy-test-client";
    pipe.args = {"--proxy-uds=" + s.server.uds_path(), "--request-host=127.0.0.1",
                 "--request-port=" + std::to_string(s.http.port()), "--pipe"};
    pipe.stdin_path = s.dir.file("pipe.in");
    pipe.stdout_path = s.dir.file("pipe.out");
    auto piped = run_process(std::move(pipe), 20s);
    INFO(piped.output);
    CHECK(piped.exit_code == 0);
    std::ifstream pin(s.dir.file("pipe.out"));
    std::stringstream pipe_out;
    pipe_out << pin.rdbuf();
    CHECK(pipe_out.str().rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(pipe_out.str().find("\r\n\r\nhello through the tunnel\n") != std::string::npos);

    ProcessOptions missing;
    missing.binary = "proxy-test-client";
    missing.args = {"--proxy-uds=" + s.server.uds_path(), "--request-host=127.0.0.1",
                    "--request-port=" + std::to_string(s.http.port()), "--request-path=/nope"};
    CHECK(run_process(std::move(missing), 20s).exit_code == 1);
  }
}

TEST_CASE("e2e: fetch a page through the TCP+mTLS frontend", "[e2e]") {
  KONN_REQUIRE_DAEMONS();
  ServerSpec spec;
  spec.tcp_frontend = true;
  TunnelStack s(spec);
  auto d = Tunnel::dial(s.channel, s.http.address(), 5s);
  REQUIRE(d.error.empty());
  auto r = http_get(*d.tunnel, s.http.address(), "/hello", 10s);
  CHECK(r.code == 200);
  CHECK(r.body == "hello through the tunnel\n");
  CHECK(d.tunnel->close(5s) == "");

  SECTION("and with the proxy-test-client binary") {
    ProcessOptions o;
    o.binary = "proxy-test-client";
    o.args = {"--proxy-host=127.0.0.1",
              "--proxy-port=" + std::to_string(s.server.frontend_port()),
              "--ca-cert=" + s.certs.ca_crt,
              "--client-cert=" + s.certs.client_crt,
              "--client-key=" + s.certs.client_key,
              "--request-host=127.0.0.1",
              "--request-port=" + std::to_string(s.http.port()),
              "--request-path=/hello"};
    o.stdout_path = s.dir.file("client.out");
    auto res = run_process(std::move(o), 20s);
    INFO(res.output);
    CHECK(res.exit_code == 0);
    std::ifstream in(s.dir.file("client.out"));
    std::stringstream body;
    body << in.rdbuf();
    CHECK(body.str() == "hello through the tunnel\n");
  }
  SECTION("a client without a certificate is refused") {
    konn::testclient::ChannelConfig c;
    c.host = "127.0.0.1";
    c.port = s.server.frontend_port();
    c.ca_cert = s.certs.ca_crt;
    auto anonymous = konn::testclient::make_channel(c);
    auto refused = Tunnel::dial(anonymous, s.http.address(), 5s);
    CHECK_FALSE(refused.tunnel);
    CHECK(refused.error.find("stream ended before DIAL_RSP") != std::string::npos);
    // The server keeps serving certified clients.
    auto again = Tunnel::dial(s.server.new_channel(), s.http.address(), 5s);
    CHECK(again.error.empty());
  }
}

TEST_CASE("e2e: 1 GiB each direction through one tunnel, SHA-256 end to end", "[e2e][bulk]") {
  KONN_REQUIRE_DAEMONS();
  TunnelStack s;
  auto d = Tunnel::dial(s.channel, s.echo.address(), 5s);
  REQUIRE(d.error.empty());
  Tunnel& t = *d.tunnel;

  const size_t kBlock = 4 << 20;
  const uint64_t kTotal = scaled_bytes(1ull << 30);
  std::string sent_hash;
  std::atomic<bool> write_ok{true};
  auto start = Clock::now();
  std::thread writer([&] {
    std::string block = random_bytes(kBlock, 42);
    Sha256 sha;
    for (uint64_t i = 0; i < kTotal / kBlock; ++i) {
      // Every block differs: a duplicated or dropped block changes the digest.
      std::memcpy(block.data(), &i, sizeof(i));
      sha.update(block);
      if (!t.write(block)) {
        write_ok = false;
        break;
      }
    }
    sent_hash = sha.hex();
  });
  Sha256 received;
  uint64_t got = 0;
  std::string chunk;
  while (got < kTotal) {
    if (t.read_for(&chunk, 30s * kSlowFactor) != Tunnel::ReadStatus::Data) break;
    received.update(chunk);
    got += chunk.size();
  }
  double secs = seconds_since(start);
  writer.join();
  REQUIRE(write_ok);
  REQUIRE(got == kTotal);
  std::string received_hash = received.hex();
  CHECK(received_hash == sent_hash);
  CHECK(t.close(10s) == "");
  // The origin's own digest of what reached it: the upstream direction alone.
  REQUIRE(eventually([&] { return !s.echo.digests().empty(); }, 10s));
  CHECK(s.echo.digests().back() == sent_hash);
  WARN((kTotal >> 20) << " MiB each way through one tunnel (agent link mTLS): " << secs << " s, "
                      << (2.0 * static_cast<double>(kTotal) / secs / 1e9)
                      << " GB/s both directions together");
}

TEST_CASE("e2e: 200 concurrent tunnels on one channel each echo their own data", "[e2e]") {
  KONN_REQUIRE_DAEMONS();
  TunnelStack s;
  constexpr int kTunnels = 200;
  std::atomic<int> dialled{0}, echoed{0}, closed{0};
  std::vector<std::string> errors(kTunnels);
  std::vector<int64_t> connect_ids(kTunnels, 0);
  std::vector<std::thread> threads;
  auto start = Clock::now();
  for (int i = 0; i < kTunnels; ++i) {
    threads.emplace_back([&, i] {
      auto d = Tunnel::dial(s.channel, s.echo.address(), 20s * kSlowFactor);
      if (!d.tunnel) {
        errors[i] = d.error;
        return;
      }
      ++dialled;
      connect_ids[i] = d.tunnel->connect_id();
      std::string mine = random_bytes(64 * 1024 + static_cast<size_t>(i), 1000 + i);
      if (d.tunnel->write(mine) && read_exactly(*d.tunnel, mine.size(), 20s * kSlowFactor) == mine)
        ++echoed;
      if (d.tunnel->close(10s).empty()) ++closed;
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (!e.empty()) FAIL_CHECK("dial failed: " << e);
  }
  CHECK(dialled == kTunnels);
  CHECK(echoed == kTunnels);
  CHECK(closed == kTunnels);
  CHECK(std::set<int64_t>(connect_ids.begin(), connect_ids.end()).size() == kTunnels);
  CHECK(s.echo.accepted() == kTunnels);
  CHECK(eventually([&] { return s.echo.active() == 0; }, 10s));
  WARN("200 tunnels dialled, echoed 64 KiB each and closed in " << seconds_since(start) << " s");
}

// reliability: proxy-server | client stops reading a 4 GiB download | its tunnel pauses
// reliability+: (backpressure), no data lost | nothing | another tunnel moves 64 MiB, on its own or
// reliability+: the same channel
TEST_CASE("e2e: a stalled reader does not stop another tunnel of the same agent", "[e2e]") {
  KONN_REQUIRE_DAEMONS();
  TunnelStack s;
  // Tunnel A asks for far more than it will read, then stops reading.
  auto a = Tunnel::dial(s.channel, s.http.address(), 5s);
  REQUIRE(a.error.empty());
  REQUIRE(a.tunnel->write("GET /bytes/4294967296 HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string first;
  REQUIRE(a.tunnel->read_for(&first, 10s) == Tunnel::ReadStatus::Data);
  // Let A's backlog build up until its sender stalls: its bytes stop growing.
  uint64_t last = 0;
  bool stalled = eventually(
      [&] {
        uint64_t now = a.tunnel->bytes_received();
        bool still = now == last && now > 0;
        last = now;
        return still && !eventually([&] { return a.tunnel->bytes_received() != now; }, 300ms);
      },
      20s * kSlowFactor);
  REQUIRE(stalled);
  WARN("tunnel A stalled after receiving " << last << " bytes (client inbox limit "
                                           << Tunnel::kInboxLimit << ")");

  auto check_b = [&](const std::shared_ptr<grpc::Channel>& channel, const char* what) {
    const size_t kB = 64 << 20;
    auto b = Tunnel::dial(channel, s.http.address(), 5s);
    REQUIRE(b.error.empty());
    auto start = Clock::now();
    auto r =
        http_get(*b.tunnel, s.http.address(), "/bytes/" + std::to_string(kB), 60s * kSlowFactor);
    double secs = seconds_since(start);
    CHECK(r.error.empty());
    CHECK(r.body.size() == kB);
    CHECK((r.body == HttpServer::pattern(0, kB)));
    CHECK(secs < 30.0 * kSlowFactor);
    WARN("tunnel B (" << what << ") moved 64 MiB in " << secs << " s while A was stalled");
    b.tunnel->close(5s);
  };
  SECTION("B on its own channel") { check_b(s.server.new_channel(), "own channel"); }
  SECTION("B on the same channel as A") { check_b(s.channel, "same channel"); }
  // A is still alive (paused) or was cut alone; either way, closing it is bounded.
  auto t0 = Clock::now();
  a.tunnel->close(5s);
  CHECK(Clock::now() - t0 < 7s);
}
