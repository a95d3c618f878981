#include "test-client/tunnel.h"

#include <set>
#include <thread>

#include <catch2/catch.hpp>

#include "test-client/channel.h"
#include "test-client/fake_proxy_service.h"
#include "test-client/http_get.h"
#include "tests/support/process_runner.h"
#include "tests/support/sanitizers.h"
#include "tests/support/temp_dir.h"

using namespace konn::testclient;
using namespace std::chrono_literals;
using konn::testsupport::eventually;
using konn::testsupport::kSlowFactor;
using konn::testsupport::scaled_bytes;
using konn::testsupport::TempDir;
using Clock = std::chrono::steady_clock;

namespace {

struct Fixture {
  TempDir dir{"konn-tc"};
  std::string sock = dir.file("proxy.sock");
  FakeProxyService fake{sock};
  std::shared_ptr<grpc::Channel> channel = make_channel(ChannelConfig{sock, "", 0, "", "", ""});
};

std::string distinct(size_t n, int seed) {
  std::string s(n, '\0');
  uint32_t x = static_cast<uint32_t>(seed) * 2654435761u + 1;
  for (auto& c : s) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

std::string read_exactly(Tunnel& t, size_t n) {
  std::string got;
  while (got.size() < n) {
    std::string chunk;
    if (t.read_for(&chunk, 5s * kSlowFactor) != Tunnel::ReadStatus::Data) break;
    got += chunk;
  }
  return got;
}

}  // namespace

TEST_CASE("tunnel: dial, echo and close through a frontend stream", "[testclient]") {
  Fixture f;
  auto d = Tunnel::dial(f.channel, "echo:80", 5s * kSlowFactor);
  REQUIRE(d.error.empty());
  REQUIRE(d.tunnel);
  Tunnel& t = *d.tunnel;
  CHECK(t.connect_id() == 7);
  CHECK(t.dial_id() > 0);

  std::string msg = distinct(100000, 1);
  REQUIRE(t.write(msg));
  CHECK(read_exactly(t, msg.size()) == msg);
  CHECK(t.close(2s * kSlowFactor) == "");
  CHECK(t.ended());
  CHECK_FALSE(t.write("late"));

  auto seen = f.fake.seen();
  REQUIRE(seen.dial_requests.size() == 1);
  const auto& req = seen.dial_requests[0];
  CHECK(req.type() == DIAL_REQ);
  CHECK(req.dialrequest().protocol() == "tcp");
  CHECK(req.dialrequest().address() == "echo:80");
  CHECK(req.dialrequest().random() == t.dial_id());
  CHECK(seen.close_requests == 1);
  // close() half-closed the stream, so the server's handler finished normally.
  CHECK(eventually([&] { return f.fake.seen().streams_finished == 1; }, 2s * kSlowFactor));
  CHECK(t.status().ok());
}

TEST_CASE("tunnel: a DIAL_RSP error comes back as the error text", "[testclient]") {
  Fixture f;
  auto d = Tunnel::dial(f.channel, "refuse:1", 5s * kSlowFactor);
  CHECK_FALSE(d.tunnel);
  CHECK(d.error == "dial tcp 127.0.0.1:1: connect: connection refused");
}

TEST_CASE("tunnel: dial timeout sends DIAL_CLS and is bounded", "[testclient]") {
  Fixture f;
  auto start = Clock::now();
  auto d = Tunnel::dial(f.channel, "silent:1", 300ms);
  auto took = Clock::now() - start;
  CHECK_FALSE(d.tunnel);
  CHECK(d.error.find("dial timeout") != std::string::npos);
  CHECK(took >= 300ms);
  CHECK(took < 2s * kSlowFactor);
  REQUIRE(eventually([&] { return f.fake.seen().close_dials.size() == 1; }, 2s * kSlowFactor));
  CHECK(f.fake.seen().close_dials[0] == f.fake.seen().dial_requests[0].dialrequest().random());
}

TEST_CASE("tunnel: no server behind the socket fails the dial quickly", "[testclient]") {
  TempDir dir{"konn-tc"};
  auto channel = make_channel(ChannelConfig{dir.file("absent.sock"), "", 0, "", "", ""});
  auto start = Clock::now();
  auto d = Tunnel::dial(channel, "echo:80", 5s * kSlowFactor);
  CHECK_FALSE(d.tunnel);
  CHECK(d.error.find("stream ended before DIAL_RSP") != std::string::npos);
  CHECK(Clock::now() - start < 3s * kSlowFactor);
}

TEST_CASE("tunnel: the far side closing ends reads after the data", "[testclient]") {
  Fixture f;
  auto d = Tunnel::dial(f.channel, "hangup:1", 5s * kSlowFactor);
  REQUIRE(d.tunnel);
  auto first = d.tunnel->read();
  REQUIRE(first);
  CHECK(*first == "bye");
  CHECK_FALSE(d.tunnel->read());
  CHECK(d.tunnel->ended());
  CHECK(d.tunnel->end_reason().empty());
  CHECK_FALSE(d.tunnel->write("x"));
  CHECK(d.tunnel->close(1s * kSlowFactor) == "");
}

TEST_CASE("tunnel: writes are split into DATA of at most 256 KiB", "[testclient]") {
  Fixture f;
  auto d = Tunnel::dial(f.channel, "sink:1", 5s * kSlowFactor);
  REQUIRE(d.tunnel);
  const size_t n = 3 * Tunnel::kMaxChunk + 17;
  REQUIRE(d.tunnel->write(distinct(n, 2)));
  CHECK(d.tunnel->bytes_sent() == n);
  REQUIRE(d.tunnel->write(std::string(10, 'x')));
  // The sink reports its count in a DATA before CLOSE_RSP; close() discards unread data, so ask
  // through CLOSE_REQ by hand: read after the fake answered.
  CHECK(eventually([&] { return f.fake.seen().data_bytes == n + 10; }, 5s * kSlowFactor));
  CHECK(f.fake.seen().max_data == Tunnel::kMaxChunk);
  CHECK(d.tunnel->close(2s * kSlowFactor) == "");
}

TEST_CASE("tunnel: close is bounded when CLOSE_RSP never comes", "[testclient]") {
  Fixture f;
  auto d = Tunnel::dial(f.channel, "noclose:1", 5s * kSlowFactor);
  REQUIRE(d.tunnel);
  auto start = Clock::now();
  std::string r = d.tunnel->close(300ms);
  CHECK(r.find("no CLOSE_RSP") != std::string::npos);
  CHECK(Clock::now() - start < 2s * kSlowFactor);
  CHECK(d.tunnel->close(300ms) == r);  // idempotent
}

TEST_CASE("tunnel: many tunnels share one channel", "[testclient]") {
  Fixture f;
  constexpr int kTunnels = 50;
  std::vector<std::unique_ptr<Tunnel>> tunnels;
  for (int i = 0; i < kTunnels; ++i) {
    auto d = Tunnel::dial(f.channel, "echo:80", 5s * kSlowFactor);
    REQUIRE(d.tunnel);
    tunnels.push_back(std::move(d.tunnel));
  }
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int i = 0; i < kTunnels; ++i) {
    threads.emplace_back([&, i] {
      std::string msg = distinct(64 * 1024 + static_cast<size_t>(i), i);
      if (tunnels[i]->write(msg) && read_exactly(*tunnels[i], msg.size()) == msg) ++good;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(good == kTunnels);
  for (auto& t : tunnels) CHECK(t->close(2s * kSlowFactor) == "");
  std::set<int64_t> ids;
  for (auto& t : tunnels) ids.insert(t->dial_id());
  CHECK(ids.size() == kTunnels);
}

TEST_CASE("tunnel: a reader that stops reading holds the sender back", "[testclient]") {
  Fixture f;
  const uint64_t total = 256ull << 20;  // not scaled: the plateau check needs it
  auto d = Tunnel::dial(f.channel, "source:" + std::to_string(total), 5s * kSlowFactor);
  REQUIRE(d.tunnel);
  // Nothing is read: the sender stalls after our inbox limit plus gRPC's buffers and windows.
  REQUIRE(
      eventually([&] { return f.fake.source_sent() >= Tunnel::kInboxLimit; }, 5s * kSlowFactor));
  uint64_t plateau = 0;
  // The plateau is reached when the count stops moving for a while.
  eventually(
      [&] {
        uint64_t now = f.fake.source_sent();
        bool still = now == plateau;
        plateau = now;
        if (still) {
          // Make sure it stays still for a moment longer.
          return !eventually([&] { return f.fake.source_sent() != now; }, 200ms);
        }
        return false;
      },
      5s * kSlowFactor);
  CHECK(plateau < 64ull << 20);
  // Reading drains everything, in order.
  uint64_t got = 0;
  bool in_order = true;
  while (auto chunk = d.tunnel->read()) {
    for (size_t i = 0; i < chunk->size(); i += 4099) {
      if (static_cast<unsigned char>((*chunk)[i]) != (got + i) % 251) in_order = false;
    }
    got += chunk->size();
  }
  CHECK(got == total);
  CHECK(in_order);
}

TEST_CASE("tunnel: throughput of one tunnel", "[testclient][perf]") {
  Fixture f;
  const uint64_t total = scaled_bytes(1ull << 30);
  SECTION("download") {
    auto d = Tunnel::dial(f.channel, "source:" + std::to_string(total), 5s * kSlowFactor);
    REQUIRE(d.tunnel);
    auto start = Clock::now();
    uint64_t got = 0;
    while (auto chunk = d.tunnel->read()) got += chunk->size();
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    CHECK(got == total);
    WARN("download " << (static_cast<double>(got) / secs / 1e9) << " GB/s");
  }
  SECTION("upload") {
    auto d = Tunnel::dial(f.channel, "sink:1", 5s * kSlowFactor);
    REQUIRE(d.tunnel);
    std::string block = distinct(4 << 20, 3);
    auto start = Clock::now();
    for (uint64_t sent = 0; sent < total; sent += block.size()) REQUIRE(d.tunnel->write(block));
    REQUIRE(eventually([&] { return f.fake.seen().data_bytes == total; }, 30s * kSlowFactor));
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    WARN("upload " << (static_cast<double>(total) / secs / 1e9) << " GB/s");
    CHECK(d.tunnel->close(2s * kSlowFactor) == "");
  }
}

TEST_CASE("tunnel: http_get parses a chunked page", "[testclient]") {
  Fixture f;
  auto d = Tunnel::dial(f.channel, "http:80", 5s * kSlowFactor);
  REQUIRE(d.tunnel);
  HttpGetResult r = http_get(*d.tunnel, "http:80", "/index", 5s * kSlowFactor);
  CHECK(r.error.empty());
  CHECK(r.code == 200);
  CHECK(r.body == "hello from fake");
}
