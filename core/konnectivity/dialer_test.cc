#include "core/konnectivity/dialer.h"

#include <array>
#include <future>
#include <thread>
#include <unistd.h>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/use_future.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include "test-client/fake_connect_server.h"
#include "test-client/fake_proxy_service.h"
#include "tests/support/process_runner.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

using namespace konn::core::konnectivity;
using namespace std::chrono_literals;
using konn::testsupport::TempDir;

namespace {

// Runs `a` on `ctx` (this thread) until it returned. A gRPC mode dialer's connection keeps
// reading, so the context never runs out of work: it is stopped after, which also lets the
// Dialer's destructor close that connection here.
template <typename T>
T run(asio::io_context& ctx, asio::awaitable<T> a) {
  auto f = asio::co_spawn(ctx, std::move(a), asio::use_future);
  ctx.restart();
  while (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    ctx.run_one_for(std::chrono::milliseconds(100));
  }
  ctx.stop();
  return f.get();
}

// Runs `ctx` on this thread until `done()` holds, for up to `timeout`: what the proxy-server sends
// after a tunnel closed (the end of its call) is read on the tunnel's thread.
template <typename Pred>
bool run_until(asio::io_context& ctx, Pred done, std::chrono::milliseconds timeout) {
  ctx.restart();
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done() && std::chrono::steady_clock::now() < until) {
    ctx.run_one_for(std::chrono::milliseconds(10));
  }
  ctx.stop();
  return done();
}

UpstreamOptions unix_upstream(const std::string& path, const std::string& mode) {
  UpstreamOptions o;
  o.address = "unix:" + path;
  o.mode = mode;
  return o;
}

// Writes `text`, reads until `want` bytes came back (or EOF/error); returns what came back.
asio::awaitable<std::string> echo_round(Tunnel& t, std::string text, size_t want) {
  auto [wec, wn] = co_await asio::async_write(t, asio::buffer(text), konn::core::io::use_nothrow);
  std::string got = t.early_bytes();
  if (wec) co_return "write: " + wec.message();
  std::array<char, 4096> buf{};
  while (got.size() < want) {
    auto [ec, n] = co_await t.async_read_some(asio::buffer(buf), konn::core::io::use_nothrow);
    got.append(buf.data(), n);
    if (ec) break;
  }
  co_return got;
}

}  // namespace

TEST_CASE("konnectivity dialer: grpc echo, close with CLOSE_REQ/CLOSE_RSP", "[konnectivity]") {
  TempDir dir{"konn-kd"};
  auto sock = dir.file("fe.sock");
  konn::testclient::FakeProxyService fake{sock};
  auto opts = unix_upstream(sock, "grpc");
  // Declared first: the dialer (and its connection) must go before the io_context it runs on.
  asio::io_context ctx;
  Dialer dialer(opts);
  auto got = run(ctx, [&]() -> asio::awaitable<std::string> {
    std::string target = "echo:80";
    auto r = co_await dialer.dial(target, 5000ms);
    if (!r.tunnel) co_return "dial: " + r.error.text;
    CHECK(std::string(r.tunnel->kind()) == "grpc");
    std::string text = "hello through a grpc tunnel";
    std::string back = co_await echo_round(*r.tunnel, text, text.size());
    r.tunnel->close();
    co_return back;
  }());
  CHECK(got == "hello through a grpc tunnel");
  REQUIRE(run_until(
      ctx, [&] { return fake.seen().close_requests == 1; }, 5s));
  auto seen = fake.seen();
  REQUIRE(seen.dial_requests.size() == 1);
  const auto& dr = seen.dial_requests[0].dialrequest();
  CHECK(dr.protocol() == "tcp");
  CHECK(dr.address() == "echo:80");
  CHECK(dr.random() > 0);
  CHECK(run_until(
      ctx, [&] { return dialer.open_streams() == 0; }, 5s));
}

TEST_CASE("konnectivity dialer: grpc errors carry the agent's reason", "[konnectivity]") {
  TempDir dir{"konn-kd"};
  auto sock = dir.file("fe.sock");
  konn::testclient::FakeProxyService fake{sock};
  // Declared first: the dialer (and its connection) must go before the io_context it runs on.
  asio::io_context ctx;
  Dialer dialer(unix_upstream(sock, "grpc"));
  auto refused = run(ctx, dialer.dial("refuse:81", 5000ms));
  REQUIRE(!refused.tunnel);
  CHECK(refused.error.failure == DialFailure::Refused);
  CHECK(refused.error.text.find("connection refused") != std::string::npos);

  // No answer: DIAL_CLS after the timeout.
  auto start = std::chrono::steady_clock::now();
  auto silent = run(ctx, dialer.dial("silent:82", 300ms));
  CHECK(std::chrono::steady_clock::now() - start < 3s);
  REQUIRE(!silent.tunnel);
  CHECK(silent.error.failure == DialFailure::Timeout);
  REQUIRE(run_until(
      ctx, [&] { return fake.seen().close_dials.size() == 1; }, 5s));
  auto seen = fake.seen();
  CHECK(seen.close_dials[0] == seen.dial_requests.back().dialrequest().random());
}

TEST_CASE("konnectivity dialer: no proxy-server behind the socket", "[konnectivity]") {
  TempDir dir{"konn-kd"};
  asio::io_context ctx;
  for (std::string mode : {"grpc", "http-connect"}) {
    Dialer dialer(unix_upstream(dir.file("none.sock"), mode));
    auto r = run(ctx, dialer.dial("echo:80", 5000ms));
    REQUIRE(!r.tunnel);
    CHECK(r.error.failure == DialFailure::ProxyUnavailable);
    CHECK(dialer.probe(500ms).has_value());
  }
}

TEST_CASE("konnectivity dialer: the far side closing gives the data, then EOF", "[konnectivity]") {
  TempDir dir{"konn-kd"};
  auto sock = dir.file("fe.sock");
  konn::testclient::FakeProxyService fake{sock};
  // Declared first: the dialer (and its connection) must go before the io_context it runs on.
  asio::io_context ctx;
  Dialer dialer(unix_upstream(sock, "grpc"));
  auto got = run(ctx, [&]() -> asio::awaitable<std::string> {
    std::string target = "hangup:80";
    auto r = co_await dialer.dial(target, 5000ms);
    if (!r.tunnel) co_return "dial: " + r.error.text;
    std::string out;
    std::array<char, 64> buf{};
    for (;;) {
      auto [ec, n] =
          co_await r.tunnel->async_read_some(asio::buffer(buf), konn::core::io::use_nothrow);
      out.append(buf.data(), n);
      if (ec) {
        out += ec == asio::error::eof ? "|eof" : "|" + ec.message();
        break;
      }
    }
    co_return out;
  }());
  CHECK(got == "bye|eof");
}

TEST_CASE("konnectivity dialer: a reader that stops reading holds the stream back",
          "[konnectivity]") {
  TempDir dir{"konn-kd"};
  auto sock = dir.file("fe.sock");
  konn::testclient::FakeProxyService fake{sock};
  // Declared first: the dialer (and its connection) must go before the io_context it runs on.
  asio::io_context ctx;
  Dialer dialer(unix_upstream(sock, "grpc"));
  constexpr uint64_t kTotal = 512ull * 1024 * 1024;
  std::unique_ptr<Tunnel> t;
  auto r = run(ctx, dialer.dial("source:" + std::to_string(kTotal), 5000ms));
  REQUIRE(r.tunnel);
  t = std::move(r.tunnel);
  // Nothing reads: what the fake manages to hand to gRPC stops growing well below the total
  // (our inbox, gRPC's buffers and the HTTP/2 windows are all that can hold it).
  uint64_t last = 0;
  auto stable_since = std::chrono::steady_clock::now();
  auto deadline = stable_since + 20s;
  ctx.restart();
  while (std::chrono::steady_clock::now() < deadline) {
    ctx.run_for(50ms);
    uint64_t now = fake.source_sent();
    if (now != last) {
      last = now;
      stable_since = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - stable_since > 500ms) {
      break;
    }
  }
  CHECK(last > 0);
  CHECK(last < 64ull * 1024 * 1024);
  // Reading resumes the flow; every byte arrives in order.
  auto checked = run(ctx, [&]() -> asio::awaitable<uint64_t> {
    std::vector<char> buf(256 * 1024);
    uint64_t pos = 0;
    for (;;) {
      auto [ec, n] = co_await t->async_read_some(asio::buffer(buf), konn::core::io::use_nothrow);
      for (size_t i = 0; i < n; ++i, ++pos) {
        if (static_cast<unsigned char>(buf[i]) != pos % 251) co_return pos;
      }
      if (ec) break;
    }
    co_return pos;
  }());
  CHECK(checked == kTotal);
}

TEST_CASE("konnectivity dialer: http-connect over a unix socket", "[konnectivity]") {
  TempDir dir{"konn-kd"};
  auto sock = dir.file("fe.sock");
  konn::testclient::FakeConnectServer fake{sock};
  // Declared first: the dialer (and its connection) must go before the io_context it runs on.
  asio::io_context ctx;
  Dialer dialer(unix_upstream(sock, "http-connect"));
  auto got = run(ctx, [&]() -> asio::awaitable<std::string> {
    std::string target = "early:80";
    auto r = co_await dialer.dial(target, 5000ms);
    if (!r.tunnel) co_return "dial: " + r.error.text;
    CHECK(r.tunnel->unix_socket() != nullptr);
    std::string text = "+echoed";
    co_return co_await echo_round(*r.tunnel, text, 5 + text.size());
  }());
  CHECK(got == "early+echoed");
  auto reqs = fake.requests();
  REQUIRE(!reqs.empty());
  CHECK(reqs[0].method == "CONNECT");
  CHECK(reqs[0].target == "early:80");

  auto refused = run(ctx, dialer.dial("refuse:81", 5000ms));
  REQUIRE(!refused.tunnel);
  CHECK(refused.error.failure == DialFailure::Refused);
  CHECK(refused.error.http_status == 502);
  CHECK(refused.error.text.find("connection refused") != std::string::npos);

  auto silent = run(ctx, dialer.dial("silent:81", 300ms));
  REQUIRE(!silent.tunnel);
  CHECK(silent.error.failure == DialFailure::Timeout);
  CHECK(!dialer.probe(1000ms).has_value());
}

TEST_CASE("konnectivity dialer: grpc over TCP with mutual TLS", "[konnectivity]") {
  const auto& certs = konn::testsupport::test_certs();
  konn::testclient::FakeProxyService fake{
      konn::testclient::FakeProxyService::Tls{certs.server_crt, certs.server_key, certs.ca_crt}};
  REQUIRE(fake.port() > 0);
  UpstreamOptions opts;
  opts.address = "127.0.0.1:" + std::to_string(fake.port());
  opts.ca_cert = certs.ca_crt;
  opts.client_cert = certs.client_crt;
  opts.client_key = certs.client_key;
  asio::io_context ctx;
  {
    Dialer dialer(opts);
    auto got = run(ctx, [&]() -> asio::awaitable<std::string> {
      auto r = co_await dialer.dial("echo:80", 5000ms);
      if (!r.tunnel) co_return "dial: " + r.error.text;
      std::string text = "hello over mutual TLS";
      co_return co_await echo_round(*r.tunnel, text, text.size());
    }());
    CHECK(got == "hello over mutual TLS");
    CHECK(dialer.connections_made() == 1);
  }
  // The certificate must name what --konnectivity-server-name says.
  opts.server_name = "not-the-server.example";
  Dialer wrong_name(opts);
  auto r = run(ctx, wrong_name.dial("echo:80", 5000ms));
  REQUIRE(!r.tunnel);
  CHECK(r.error.failure == DialFailure::ProxyUnavailable);
  CHECK_THAT(r.error.text, Catch::Contains("certificate verify failed"));
}

TEST_CASE(
    "konnectivity dialer: the tunnels of one thread share its connection, each thread has "
    "its own",
    "[konnectivity]") {
  TempDir dir{"konn-kd"};
  auto sock = dir.file("fe.sock");
  konn::testclient::FakeProxyService fake{sock};
  asio::io_context a;
  asio::io_context b;
  Dialer dialer(unix_upstream(sock, "grpc"));
  // Three tunnels at once on each of two threads; every read completes on its tunnel's thread.
  auto three = [&](asio::io_context& ctx, std::string tag) -> asio::awaitable<std::string> {
    std::vector<std::unique_ptr<Tunnel>> open;
    for (int i = 0; i < 3; ++i) {
      auto r = co_await dialer.dial("echo:80", 5000ms);
      if (!r.tunnel) co_return "dial: " + r.error.text;
      open.push_back(std::move(r.tunnel));
    }
    std::string out;
    for (auto& t : open) {
      std::string text = tag + std::to_string(out.size());
      auto [wec, wn] =
          co_await asio::async_write(*t, asio::buffer(text), konn::core::io::use_nothrow);
      if (wec) co_return "write: " + wec.message();
      std::array<char, 64> buf{};
      auto [ec, n] = co_await t->async_read_some(asio::buffer(buf), konn::core::io::use_nothrow);
      if (ec || !ctx.get_executor().running_in_this_thread()) co_return "read: " + ec.message();
      out.append(buf.data(), n);
    }
    co_return out;
  };
  std::string got_b;
  std::thread tb([&] { got_b = run(b, three(b, "b")); });
  std::string got_a = run(a, three(a, "a"));
  tb.join();
  CHECK(got_a == "a0a2a4");
  CHECK(got_b == "b0b2b4");
  CHECK(dialer.connections_made() == 2);
  CHECK(fake.seen().dial_requests.size() == 6);
}

TEST_CASE("konnectivity dialer: a proxy-server that restarted gets a new connection",
          "[konnectivity]") {
  TempDir dir{"konn-kd"};
  auto sock = dir.file("fe.sock");
  asio::io_context ctx;
  auto fake = std::make_unique<konn::testclient::FakeProxyService>(sock);
  Dialer dialer(unix_upstream(sock, "grpc"));
  auto echo = [&]() -> asio::awaitable<std::string> {
    auto r = co_await dialer.dial("echo:80", 5000ms);
    if (!r.tunnel) co_return "dial: " + r.error.text;
    co_return co_await echo_round(*r.tunnel, "again", 5);
  };
  CHECK(run(ctx, echo()) == "again");
  CHECK(dialer.connections_made() == 1);
  // The proxy-server goes away (its connection closes), and comes back on the same socket.
  fake.reset();
  ::unlink(sock.c_str());
  auto down = run(ctx, dialer.dial("echo:80", 2000ms));
  REQUIRE(!down.tunnel);
  CHECK(down.error.failure == DialFailure::ProxyUnavailable);
  fake = std::make_unique<konn::testclient::FakeProxyService>(sock);
  CHECK(run(ctx, echo()) == "again");
  CHECK(dialer.connections_made() == 2);
}
