#include "core/io/worker_pool.h"

#include <atomic>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <catch2/catch.hpp>

namespace {

int open_descriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

}  // namespace

TEST_CASE("worker pool runs each context on its own thread, round robin", "[io]") {
  konn::core::io::WorkerPool pool(2);
  pool.start();
  REQUIRE(pool.size() == 2);
  auto& a = pool.next();
  auto& b = pool.next();
  CHECK(&a != &b);
  CHECK(&pool.next() == &a);
  std::promise<std::thread::id> pa;
  std::promise<std::thread::id> pb;
  asio::post(a, [&] { pa.set_value(std::this_thread::get_id()); });
  asio::post(b, [&] { pb.set_value(std::this_thread::get_id()); });
  auto ta = pa.get_future().get();
  auto tb = pb.get_future().get();
  CHECK(ta != tb);
  CHECK(ta != std::this_thread::get_id());
  pool.stop();
  pool.stop();  // idempotent
}

TEST_CASE("worker pool places a connection beside another on the same context", "[io]") {
  konn::core::io::WorkerPool pool(3);
  auto first = pool.place();
  auto second = pool.place();
  CHECK(first.index != second.index);
  for (int i = 0; i < 4; ++i) {
    auto beside = pool.place_at(second.index, 2);
    CHECK(&beside.ctx == &second.ctx);
    CHECK(beside.index == second.index);
    CHECK(&pool.at(beside.index) == &second.ctx);
  }
  CHECK(&pool.place_at(second.index + 3).ctx == &second.ctx);  // taken modulo the size
}

TEST_CASE("worker pool contexts hold their descriptors from the start", "[io]") {
  // Without priming, a context's reactor (epoll, eventfd, timerfd) appears on its first timer or
  // socket, and an idle daemon's descriptor count after traffic differs from its count at start.
  konn::core::io::WorkerPool pool(2);
  const int before = open_descriptors();
  for (size_t i = 0; i < pool.size(); ++i) {
    asio::steady_timer t(pool.at(i));
    asio::ip::tcp::socket s(pool.at(i));
    s.open(asio::ip::tcp::v4());
    s.close();
  }
  CHECK(open_descriptors() == before);
}
