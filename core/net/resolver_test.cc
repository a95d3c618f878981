#include "core/net/resolver.h"

#include <map>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/udp.hpp>
#include <catch2/catch.hpp>

using namespace std::chrono_literals;
using konn::core::net::Resolver;
using asio::ip::udp;

namespace {

// A tiny authoritative DNS server on 127.0.0.1:0 (UDP) answering A/AAAA from a table; names in
// `silent` are never answered, every other name gets NXDOMAIN.
class FakeDns {
 public:
  explicit FakeDns(asio::io_context& ctx) : socket_(ctx, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    receive();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(socket_.local_endpoint().port()); }
  std::map<std::string, std::vector<asio::ip::address>> records;
  std::vector<std::string> silent;
  int queries = 0;

 private:
  void receive() {
    socket_.async_receive_from(asio::buffer(buf_), peer_, [this](std::error_code ec, size_t n) {
      if (ec) return;
      answer(n);
      receive();
    });
  }

  void answer(size_t n) {
    ++queries;
    if (n < 12) return;
    // Question: labels from offset 12, then QTYPE, QCLASS.
    size_t pos = 12;
    std::string name;
    while (pos < n && buf_[pos] != 0) {
      size_t len = buf_[pos];
      if (!name.empty()) name += '.';
      name.append(reinterpret_cast<const char*>(&buf_[pos + 1]), len);
      pos += len + 1;
    }
    pos += 1;
    if (pos + 4 > n) return;
    uint16_t qtype = static_cast<uint16_t>(buf_[pos] << 8 | buf_[pos + 1]);
    size_t question_end = pos + 4;
    for (const auto& s : silent) {
      if (s == name) return;
    }
    std::vector<uint8_t> out(buf_.begin(), buf_.begin() + static_cast<long>(question_end));
    out[2] = 0x84;  // QR, AA
    out[3] = 0x00;
    out[6] = out[7] = out[8] = out[9] = out[10] = out[11] = 0;
    auto it = records.find(name);
    if (it == records.end()) {
      out[3] = 0x03;  // NXDOMAIN
    } else {
      uint16_t count = 0;
      for (const auto& a : it->second) {
        if ((qtype == 1 && a.is_v4()) || (qtype == 28 && a.is_v6())) {
          out.insert(out.end(), {0xC0, 0x0C, 0, static_cast<uint8_t>(qtype), 0, 1, 0, 0, 0, 60});
          if (a.is_v4()) {
            auto b = a.to_v4().to_bytes();
            out.insert(out.end(), {0, 4});
            out.insert(out.end(), b.begin(), b.end());
          } else {
            auto b = a.to_v6().to_bytes();
            out.insert(out.end(), {0, 16});
            out.insert(out.end(), b.begin(), b.end());
          }
          ++count;
        }
      }
      out[7] = static_cast<uint8_t>(count);
    }
    socket_.send_to(asio::buffer(out), peer_);
  }

  udp::socket socket_;
  udp::endpoint peer_;
  std::array<uint8_t, 1500> buf_{};
};

Resolver::Result run_resolve(asio::io_context& ctx, Resolver& r, const std::string& host) {
  Resolver::Result out;
  bool done = false;
  asio::co_spawn(ctx, [&]() -> konn::core::io::Awaitable<void> {
    out = co_await r.resolve(host);
    done = true;
  }, asio::detached);
  // The fake server's pending receive keeps the context busy: run until the answer, not for the
  // whole bound.
  auto until = std::chrono::steady_clock::now() + 10s;
  while (!done && std::chrono::steady_clock::now() < until) ctx.run_one_for(100ms);
  ctx.restart();
  REQUIRE(done);
  return out;
}

}  // namespace

TEST_CASE("resolver returns A and AAAA records from the configured server", "[resolver]") {
  asio::io_context ctx;
  FakeDns dns(ctx);
  dns.records["api.test.example"] = {asio::ip::make_address("10.1.2.3"),
                                     asio::ip::make_address("fd00::7")};
  Resolver r(ctx.get_executor(), {{dns.address()}, 500ms, 1});
  auto res = run_resolve(ctx, r, "api.test.example");
  REQUIRE_FALSE(res.ec);
  REQUIRE(res.addresses.size() == 2);
  CHECK(std::count(res.addresses.begin(), res.addresses.end(), asio::ip::make_address("10.1.2.3")) == 1);
  CHECK(std::count(res.addresses.begin(), res.addresses.end(), asio::ip::make_address("fd00::7")) == 1);
  CHECK(r.pending() == 0);
}

TEST_CASE("resolver reports NXDOMAIN as host_not_found", "[resolver]") {
  asio::io_context ctx;
  FakeDns dns(ctx);
  Resolver r(ctx.get_executor(), {{dns.address()}, 500ms, 1});
  auto res = run_resolve(ctx, r, "missing.test.example");
  CHECK(res.ec == asio::error::host_not_found);
  CHECK(res.addresses.empty());
}

TEST_CASE("resolver passes IP literals through without a query", "[resolver]") {
  asio::io_context ctx;
  FakeDns dns(ctx);
  Resolver r(ctx.get_executor(), {{dns.address()}, 500ms, 1});
  auto res = run_resolve(ctx, r, "::1");
  REQUIRE_FALSE(res.ec);
  REQUIRE(res.addresses == std::vector<asio::ip::address>{asio::ip::make_address("::1")});
  CHECK(dns.queries == 0);
}

TEST_CASE("a silent server times out while other lookups on the same thread complete",
          "[resolver]") {
  asio::io_context ctx;
  FakeDns dns(ctx);
  dns.records["fast.test.example"] = {asio::ip::make_address("10.9.9.9")};
  dns.silent = {"slow.test.example"};
  Resolver r(ctx.get_executor(), {{dns.address()}, 300ms, 1});
  Resolver::Result slow, fast;
  std::chrono::steady_clock::time_point fast_at, slow_at;
  auto start = std::chrono::steady_clock::now();
  asio::co_spawn(ctx, [&]() -> konn::core::io::Awaitable<void> {
    slow = co_await r.resolve("slow.test.example");
    slow_at = std::chrono::steady_clock::now();
  }, asio::detached);
  asio::co_spawn(ctx, [&]() -> konn::core::io::Awaitable<void> {
    fast = co_await r.resolve("fast.test.example");
    fast_at = std::chrono::steady_clock::now();
  }, asio::detached);
  auto until = start + 10s;
  while ((slow_at == std::chrono::steady_clock::time_point{} ||
          fast_at == std::chrono::steady_clock::time_point{}) &&
         std::chrono::steady_clock::now() < until) {
    ctx.run_one_for(100ms);
  }
  REQUIRE_FALSE(fast.ec);
  CHECK(fast.addresses.front() == asio::ip::make_address("10.9.9.9"));
  CHECK(slow.ec == asio::error::host_not_found_try_again);
  CHECK(fast_at < slow_at);
  CHECK(fast_at - start < 250ms);
  CHECK(slow_at - start < 5s);
}

TEST_CASE("destroying the resolver completes abandoned lookups", "[resolver]") {
  asio::io_context ctx;
  FakeDns dns(ctx);
  dns.silent = {"slow.test.example"};
  Resolver::Result res;
  bool done = false;
  {
    auto r = std::make_unique<Resolver>(ctx.get_executor(), Resolver::Options{{dns.address()}, 5000ms, 1});
    asio::co_spawn(ctx, [&]() -> konn::core::io::Awaitable<void> {
      res = co_await r->resolve("slow.test.example");
      done = true;
    }, asio::detached);
    ctx.run_for(100ms);
    CHECK(r->pending() == 1);
  }
  ctx.restart();
  ctx.run_for(1s);
  REQUIRE(done);
  CHECK(res.ec == asio::error::no_recovery);
}
