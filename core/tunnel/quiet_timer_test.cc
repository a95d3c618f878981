#include "core/tunnel/quiet_timer.h"

#include <atomic>
#include <thread>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <catch2/catch.hpp>

using konn::core::tunnel::QuietTimer;
using namespace std::chrono_literals;

namespace {

// Runs `ctx` for `d` of wall time.
void run_for(asio::io_context& ctx, std::chrono::milliseconds d) {
  ctx.restart();
  ctx.run_for(d);
}

}  // namespace

TEST_CASE("a quiet timer fires once nothing moved for its limit, and only once", "[tunnel]") {
  asio::io_context ctx;
  int fired = 0;
  QuietTimer t(ctx.get_executor(), [&] { ++fired; });
  t.set_limit(100ms);
  run_for(ctx, 400ms);
  CHECK(fired == 1);
  // set_limit after firing does not re-arm it.
  t.set_limit(50ms);
  run_for(ctx, 150ms);
  CHECK(fired == 1);
}

TEST_CASE("touches from another thread keep a quiet timer from firing", "[tunnel]") {
  asio::io_context ctx;
  std::atomic<int> fired{0};
  QuietTimer t(ctx.get_executor(), [&] { ++fired; });
  t.set_limit(150ms);
  std::atomic<bool> busy{true};
  std::thread toucher([&] {
    while (busy) {
      t.touch();
      std::this_thread::sleep_for(20ms);
    }
  });
  run_for(ctx, 500ms);
  CHECK(fired == 0);
  busy = false;
  toucher.join();
  auto quiet_from = std::chrono::steady_clock::now();
  while (fired == 0 && std::chrono::steady_clock::now() - quiet_from < 2s) run_for(ctx, 10ms);
  CHECK(fired == 1);
  auto took = std::chrono::steady_clock::now() - quiet_from;
  CHECK(took >= 100ms);
  CHECK(took < 400ms);
}

TEST_CASE("a quiet timer's shorter limit takes effect at once, zero disarms it, stop ends it",
          "[tunnel]") {
  asio::io_context ctx;
  int fired = 0;
  {
    QuietTimer t(ctx.get_executor(), [&] { ++fired; });
    t.set_limit(1h);
    run_for(ctx, 50ms);
    t.set_limit(50ms);  // the pending 1 h wait must not hold it
    run_for(ctx, 300ms);
    CHECK(fired == 1);
  }
  {
    QuietTimer t(ctx.get_executor(), [&] { ++fired; });
    t.set_limit(50ms);
    t.set_limit(QuietTimer::Clock::duration::zero());
    run_for(ctx, 200ms);
    CHECK(fired == 1);
  }
  {
    QuietTimer t(ctx.get_executor(), [&] { ++fired; });
    t.set_limit(50ms);
    run_for(ctx, 10ms);
    t.stop();
    run_for(ctx, 200ms);
    CHECK(fired == 1);
  }
  {
    // Destroyed with a wait pending: the wait finds the shared state, not a dangling timer.
    auto t = std::make_unique<QuietTimer>(ctx.get_executor(), [&] { ++fired; });
    t->set_limit(50ms);
    run_for(ctx, 10ms);
    t.reset();
    run_for(ctx, 200ms);
    CHECK(fired == 1);
  }
}
