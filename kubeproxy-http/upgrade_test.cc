#include "kubeproxy-http/upgrade.h"

#include <chrono>
#include <optional>
#include <string>
#include <tuple>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include "tests/support/loopback.h"

using asio::ip::tcp;
using konn::kubeproxy::ByteStream;
using konn::kubeproxy::StreamRelayStats;
using namespace std::chrono_literals;

namespace {

// client <-> [downstream relay upstream] <-> destination, all loopback TCP on one io_context.
struct Relay {
  asio::io_context io;
  tcp::socket client{io}, downstream{io}, upstream{io}, destination{io};
  std::optional<StreamRelayStats> result;
  std::chrono::steady_clock::time_point ended;
  Relay() {
    std::tie(client, downstream) = konn::testsupport::tcp_pair(io);
    std::tie(upstream, destination) = konn::testsupport::tcp_pair(io);
  }
  void start(std::chrono::nanoseconds half_close_timeout) {
    asio::co_spawn(
        io,
        [this, half_close_timeout]() -> konn::core::io::Awaitable<void> {
          ByteStream down(std::move(downstream));
          ByteStream up(std::move(upstream));
          result = co_await konn::kubeproxy::relay_streams(down, up, 64 * 1024, half_close_timeout);
          ended = std::chrono::steady_clock::now();
        },
        asio::detached);
  }
};

}  // namespace

TEST_CASE(
    "a relay whose one side finished is closed once nothing moved for the half-close "
    "timeout",
    "[kubeproxy]") {
  Relay r;
  r.start(200ms);
  asio::write(r.client, asio::buffer(std::string("request")));
  r.client.shutdown(tcp::socket::shutdown_send);  // the destination ignores this EOF
  auto half_closed = std::chrono::steady_clock::now();
  r.io.run_for(100ms);
  std::string got(7, '\0');
  asio::read(r.destination, asio::buffer(got));
  CHECK(got == "request");
  // Traffic the other way keeps it open past the timeout.
  std::chrono::steady_clock::time_point last_traffic;
  for (int i = 0; i < 4; ++i) {
    asio::write(r.destination, asio::buffer(std::string("x")));
    last_traffic = std::chrono::steady_clock::now();
    r.io.run_for(100ms);
    CHECK_FALSE(r.result);
  }
  while (!r.result && std::chrono::steady_clock::now() - half_closed < 5s) r.io.run_for(20ms);
  REQUIRE(r.result);
  CHECK(r.result->half_close_timed_out);
  CHECK(r.ended - last_traffic >= 150ms);
  CHECK(r.ended - last_traffic < 2s);
  // The client read the four bytes, then the end.
  std::string back(4, '\0');
  asio::read(r.client, asio::buffer(back));
  CHECK(back == "xxxx");
  char c;
  std::error_code ec;
  r.client.read_some(asio::buffer(&c, 1), ec);
  CHECK(ec);
}

TEST_CASE("a relay without a half-close timeout waits for the other side however long",
          "[kubeproxy]") {
  Relay r;
  r.start(std::chrono::nanoseconds::zero());
  r.client.shutdown(tcp::socket::shutdown_send);
  r.io.run_for(400ms);
  CHECK_FALSE(r.result);
  r.destination.shutdown(tcp::socket::shutdown_send);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!r.result && std::chrono::steady_clock::now() < deadline) r.io.run_for(20ms);
  REQUIRE(r.result);
  CHECK_FALSE(r.result->half_close_timed_out);
  CHECK_FALSE(r.result->error);
}
