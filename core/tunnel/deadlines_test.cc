#include "core/tunnel/deadlines.h"

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>

using konn::core::tunnel::Deadlines;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// An io_context run by a thread of its own, as the server's timer thread runs its context.
struct TimerThread {
  asio::io_context ctx;
  asio::executor_work_guard<asio::io_context::executor_type> guard{ctx.get_executor()};
  std::thread thread{[this] { ctx.run(); }};
  ~TimerThread() {
    guard.reset();
    ctx.stop();
    thread.join();
  }
};

// Waits until `pred` holds, up to `limit`.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 3s) {
  auto until = Clock::now() + limit;
  while (!pred()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

}  // namespace

TEST_CASE("a deadline runs on the timer's thread once its delay passed, never before", "[tunnel]") {
  TimerThread tt;
  Deadlines d(tt.ctx.get_executor(), 20ms);
  std::atomic<bool> ran{false};
  std::atomic<bool> on_timer_thread{false};
  auto start = Clock::now();
  std::atomic<int64_t> took_ms{0};
  d.arm(150ms, [&] {
    took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    on_timer_thread = std::this_thread::get_id() == tt.thread.get_id();
    ran = true;
  });
  CHECK(d.pending() == 1);
  REQUIRE(eventually([&] { return ran.load(); }));
  CHECK(took_ms >= 150);
  CHECK(took_ms < 150 + 20 + 200);  // slack, plus a loaded machine's scheduling
  CHECK(on_timer_thread);
  CHECK(d.pending() == 0);
}

TEST_CASE("a cancelled deadline never runs, and cancel says whether it was still pending",
          "[tunnel]") {
  TimerThread tt;
  Deadlines d(tt.ctx.get_executor(), 10ms);
  std::atomic<int> ran{0};
  auto a = d.arm(50ms, [&] { ran += 1; });
  auto b = d.arm(60ms, [&] { ran += 10; });
  CHECK(a != 0);
  CHECK(a != b);
  CHECK(d.cancel(a));
  CHECK_FALSE(d.cancel(a));
  CHECK_FALSE(d.cancel(0));
  REQUIRE(eventually([&] { return ran.load() != 0; }));
  std::this_thread::sleep_for(100ms);
  CHECK(ran == 10);
  CHECK_FALSE(d.cancel(b));  // already ran
  CHECK(d.pending() == 0);
}

TEST_CASE("deadlines cancelled before they pass cost the timer no wake-up each", "[tunnel]") {
  TimerThread tt;
  Deadlines d(tt.ctx.get_executor(), 20ms);
  // A dial's deadlines: armed, then cancelled a moment later, a thousand times over 100 ms.
  for (int i = 0; i < 1000; ++i) {
    auto id = d.arm(300ms, [] { FAIL("a cancelled deadline ran"); });
    if (i % 100 == 0) std::this_thread::sleep_for(10ms);
    CHECK(d.cancel(id));
  }
  CHECK(d.pending() == 0);
  std::this_thread::sleep_for(600ms);
  // The first arm scheduled one wake, which found nothing due and went back to sleep.
  CHECK(d.wakes() <= 1);
}

TEST_CASE("an earlier deadline than the one the timer waits for is not held back by it",
          "[tunnel]") {
  TimerThread tt;
  Deadlines d(tt.ctx.get_executor(), 10ms);
  std::mutex mu;
  std::vector<int> order;
  auto start = Clock::now();
  std::atomic<int64_t> short_ms{-1};
  d.arm(2s, [&] {
    std::lock_guard lock(mu);
    order.push_back(3);
  });
  d.arm(80ms, [&] {
    short_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    std::lock_guard lock(mu);
    order.push_back(1);
  });
  d.arm(90ms, [&] {
    std::lock_guard lock(mu);
    order.push_back(2);
  });
  REQUIRE(eventually([&] {
    std::lock_guard lock(mu);
    return order.size() == 2;
  }));
  CHECK(short_ms >= 80);
  CHECK(short_ms < 600);
  {
    std::lock_guard lock(mu);
    CHECK(order == std::vector<int>{1, 2});
  }
  CHECK(d.pending() == 1);
}

TEST_CASE("deadlines armed and cancelled from many threads each run exactly when not cancelled",
          "[tunnel]") {
  TimerThread tt;
  Deadlines d(tt.ctx.get_executor(), 5ms);
  std::atomic<int> ran{0};
  std::atomic<int> kept{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        auto id = d.arm(std::chrono::milliseconds(1 + (i * 7 + t) % 40), [&] { ++ran; });
        if (i % 3 == 0) {
          ++kept;
        } else if (!d.cancel(id)) {
          ++kept;  // it ran before we could cancel it
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(eventually([&] { return ran.load() == kept.load(); }));
  std::this_thread::sleep_for(100ms);
  CHECK(ran == kept);
  CHECK(d.pending() == 0);
}

TEST_CASE("destroying deadlines drops what is pending without running it", "[tunnel]") {
  TimerThread tt;
  auto held = std::make_shared<int>(7);
  std::atomic<bool> ran{false};
  {
    Deadlines d(tt.ctx.get_executor(), 5ms);
    d.arm(50ms, [&ran, held] { ran = true; });
    CHECK(held.use_count() == 2);
  }
  CHECK(held.use_count() == 1);  // the callback was released with the Deadlines
  std::this_thread::sleep_for(150ms);
  CHECK_FALSE(ran);
}
