#include "proxy-server/tunnel/pending_dial_table.h"

#include <catch2/catch.hpp>

#include "proxy-server/tunnel/connection_table.h"
#include "proxy-server/tunnel/frontend.h"

using namespace konn::server;

namespace {

struct NullFrontend : Frontend {
  bool deliver_dial_response(Packet&&) override { return true; }
  void deliver_data(Packet&&) override {}
  void deliver_close(Packet&&) override {}
  void deliver_window_update(int64_t) override {}
  void deliver_close_write(Packet&&) override {}
  void backend_gone() override {}
  void close_stalled(std::chrono::steady_clock::duration) override {}
  TunnelStatus status() const override { return {}; }
  std::string log_prefix() const override { return ""; }
};

}  // namespace

TEST_CASE("pending dials are keyed by dial id and swept per backend", "[server]") {
  PendingDialTable t;
  auto f1 = std::make_shared<NullFrontend>();
  auto f2 = std::make_shared<NullFrontend>();
  auto* b1 = reinterpret_cast<const Backend*>(0x1);
  auto* b2 = reinterpret_cast<const Backend*>(0x2);
  using R = PendingDialTable::AddResult;
  CHECK(t.add(10, f1, b1) == R::Added);
  CHECK(t.add(10, f2, b2) == R::Duplicate);  // the same dial id twice is refused
  CHECK(t.add(11, f2, b2) == R::Added);
  CHECK(t.add(12, f2, b1) == R::Added);
  CHECK(t.size_of(b1) == 2);
  auto swept = t.take_all(b1);
  CHECK(t.size_of(b1) == 0);
  CHECK(swept.size() == 2);
  CHECK(t.size() == 1);
  auto e = t.take(11);
  REQUIRE(e);
  CHECK(e->frontend.lock() == f2);
  CHECK_FALSE(t.take(11));
}

TEST_CASE("pending dials are bounded in all and per backend", "[server]") {
  using R = PendingDialTable::AddResult;
  PendingDialTable t;
  auto f = std::make_shared<NullFrontend>();
  auto* b1 = reinterpret_cast<const Backend*>(0x1);
  auto* b2 = reinterpret_cast<const Backend*>(0x2);
  CHECK(t.add(1, f, b1, 3, 2) == R::Added);
  CHECK(t.add(2, f, b1, 3, 2) == R::Added);
  CHECK(t.add(3, f, b1, 3, 2) == R::TooManyForAgent);  // b1 holds its 2
  CHECK(t.add(3, f, b2, 3, 2) == R::Added);
  CHECK(t.add(4, f, b2, 3, 2) == R::TooMany);  // 3 in all
  CHECK(t.size() == 3);
  CHECK(t.take(1));
  CHECK(t.add(4, f, b1, 3, 2) == R::Added);  // room again, for b1 too
  CHECK(t.add(5, f, b2, 0, 0) == R::Added);  // 0: no limit
  CHECK(t.size_of(b1) == 2);
  CHECK(t.size_of(b2) == 2);
}

TEST_CASE("connection table hands out and removes tunnels", "[server]") {
  ConnectionTable t;
  auto f = std::make_shared<NullFrontend>();
  t.add(1, f);
  t.add(2, f);
  CHECK(t.find(1) == f);
  CHECK(t.take(1) == f);
  CHECK(t.find(1) == nullptr);
  CHECK(t.take_all().size() == 1);
  CHECK(t.size() == 0);
}

TEST_CASE("a backend's pending-dial count follows its entries (the agent choice reads it)",
          "[server][strategy]") {
  using R = PendingDialTable::AddResult;
  PendingDialTable t;
  auto f = std::make_shared<NullFrontend>();
  auto* b1 = reinterpret_cast<const Backend*>(0x1);
  auto* b2 = reinterpret_cast<const Backend*>(0x2);
  auto c1 = std::make_shared<std::atomic<size_t>>(0);
  auto c2 = std::make_shared<std::atomic<size_t>>(0);
  CHECK(t.add(1, f, b1, 0, 0, c1) == R::Added);
  CHECK(t.add(2, f, b1, 0, 0, c1) == R::Added);
  CHECK(t.add(3, f, b2, 0, 0, c2) == R::Added);
  CHECK(t.add(3, f, b1, 0, 0, c1) == R::Duplicate);  // a refused dial is not counted
  CHECK(t.add(4, f, b1, 0, 2, c1) == R::TooManyForAgent);
  CHECK(*c1 == 2);
  CHECK(*c2 == 1);
  CHECK(t.take(1));  // answered
  CHECK(*c1 == 1);
  c2.reset();  // the backend is gone; its entries still hold the count
  CHECK(t.take_all(b2).size() == 1);
  CHECK(t.take_all(b1).size() == 1);
  CHECK(*c1 == 0);
}

TEST_CASE("connection table size is kept without its lock", "[server][strategy]") {
  ConnectionTable t;
  auto f = std::make_shared<NullFrontend>();
  t.add(1, f);
  t.add(1, f);  // the same id again replaces it
  t.add(2, f);
  CHECK(t.size() == 2);
  t.take(1);
  t.take(7);
  CHECK(t.size() == 1);
  t.add(3, f);
  CHECK(t.take_all().size() == 2);
  CHECK(t.size() == 0);
}
