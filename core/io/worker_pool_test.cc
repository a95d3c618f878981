#include "core/io/worker_pool.h"

#include <atomic>
#include <future>
#include <set>
#include <thread>

#include <asio/post.hpp>
#include <catch2/catch.hpp>

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
