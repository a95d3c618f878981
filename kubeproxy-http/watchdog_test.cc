#include "kubeproxy-http/watchdog.h"

#include <functional>
#include <optional>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include "tests/support/loopback.h"

using asio::ip::tcp;
using konn::kubeproxy::Watchdog;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST_CASE("watchdog: a read still pending at the deadline is cancelled", "[kubeproxy][unit]") {
  asio::io_context io;
  auto sockets = konn::testsupport::tcp_pair(io);
  tcp::socket& near = sockets.first;
  tcp::socket& far = sockets.second;  // silent until the second half

  int expiries = 0;
  Watchdog w(io.get_executor(), [&] {
    ++expiries;
    near.cancel();
  });
  char buf[16];
  std::optional<std::error_code> result;
  auto start = Clock::now();
  w.arm(50ms);
  near.async_read_some(asio::buffer(buf), [&](std::error_code ec, size_t) { result = ec; });
  io.run_for(5s);
  REQUIRE(result.has_value());
  CHECK(*result == asio::error::operation_aborted);
  CHECK(w.expired());
  CHECK(expiries == 1);
  CHECK(Clock::now() - start >= 50ms);

  // The socket stays usable: the next bounded read gets what the peer sends.
  w.arm(5s);
  CHECK_FALSE(w.expired());
  result.reset();
  size_t got = 0;
  near.async_read_some(asio::buffer(buf), [&](std::error_code ec, size_t n) {
    result = ec;
    got = n;
    w.disarm();
  });
  asio::write(far, asio::buffer("hi", 2));
  io.restart();
  // Not run_for(5s): the disarmed watchdog's timer stays pending until its old deadline.
  auto until = Clock::now() + 5s;
  while (!result && Clock::now() < until) io.run_one_for(100ms);
  REQUIRE(result.has_value());
  CHECK_FALSE(*result);
  CHECK(got == 2);
  CHECK(expiries == 1);
}

TEST_CASE("watchdog: arming again moves the deadline and disarm stops it", "[kubeproxy][unit]") {
  asio::io_context io;
  int expiries = 0;
  Watchdog w(io.get_executor(), [&] { ++expiries; });

  // Re-armed every 20 ms for 300 ms with a 100 ms bound: it never expires.
  asio::steady_timer tick(io);
  int ticks = 0;
  std::function<void()> next = [&] {
    w.arm(100ms);
    if (++ticks == 15) {
      w.disarm();
      return;
    }
    tick.expires_after(20ms);
    tick.async_wait([&](std::error_code) { next(); });
  };
  next();
  io.run_for(600ms);
  CHECK(ticks == 15);
  CHECK(expiries == 0);
  CHECK_FALSE(w.expired());

  // A shorter bound after a longer one takes effect at once.
  auto start = Clock::now();
  w.arm(10s);
  w.arm(30ms);
  io.restart();
  while (expiries == 0 && Clock::now() - start < 5s) io.run_one_for(100ms);
  CHECK(expiries == 1);
  CHECK(Clock::now() - start < 5s);
  CHECK(w.expired());
}

TEST_CASE("watchdog: gone before its deadline, it never calls back", "[kubeproxy][unit]") {
  asio::io_context io;
  int expiries = 0;
  {
    Watchdog w(io.get_executor(), [&] { ++expiries; });
    w.arm(20ms);
  }
  io.run_for(200ms);
  CHECK(expiries == 0);
}
