#include "core/endpoint/connection_table.h"

#include <catch2/catch.hpp>

#include "core/endpoint/endpoint_connection.h"

using namespace konn::core::endpoint;

namespace {

std::shared_ptr<EndpointConnection> make_conn(asio::io_context& ctx, int64_t id, int64_t dial,
                                              const std::shared_ptr<ConnectionTable>& table) {
  // Never started: only its identity matters to the table.
  return std::make_shared<EndpointConnection>(
      ctx, nullptr, table, id, dial, "s1", EndpointSettings{}, std::make_shared<EndpointStats>());
}

}  // namespace

TEST_CASE("connectIDs start at 1 and grow", "[endpoint]") {
  ConnectionTable t;
  CHECK(t.allocate_connect_id() == 1);
  CHECK(t.allocate_connect_id() == 2);
  CHECK(t.allocate_connect_id() == 3);
}

TEST_CASE("a dialing connection is found by dialID only until established", "[endpoint]") {
  asio::io_context ctx;
  auto t = std::make_shared<ConnectionTable>();
  auto c = make_conn(ctx, 1, 77, t);
  REQUIRE(t->add_dial(77, c));
  CHECK_FALSE(t->add_dial(77, make_conn(ctx, 2, 77, t)));  // dial id in use
  CHECK(t->find_dial(77) == c);
  CHECK(t->find(1) == nullptr);
  REQUIRE(t->establish(77, 1, c.get()));
  CHECK(t->find(1) == c);
  CHECK(t->find_dial(77) == c);  // DIAL_CLS still reaches it
  CHECK(t->size() == 1);
  t->remove(77, 1, c.get());
  CHECK(t->find(1) == nullptr);
  CHECK(t->find_dial(77) == nullptr);
  CHECK(t->size() == 0);
}

TEST_CASE("remove never drops another connection that reuses an id", "[endpoint]") {
  asio::io_context ctx;
  auto t = std::make_shared<ConnectionTable>();
  auto old_conn = make_conn(ctx, 1, 5, t);
  auto new_conn = make_conn(ctx, 2, 5, t);
  REQUIRE(t->add_dial(5, new_conn));
  t->remove(5, 1, old_conn.get());
  CHECK(t->find_dial(5) == new_conn);
  CHECK_FALSE(t->establish(5, 1, old_conn.get()));
  t->take_all();  // connections hold their table: a stream always empties it at its end
}

TEST_CASE("take_all empties the table and refuses later dials", "[endpoint]") {
  asio::io_context ctx;
  auto t = std::make_shared<ConnectionTable>();
  auto a = make_conn(ctx, 1, 10, t);
  auto b = make_conn(ctx, 2, 11, t);
  REQUIRE(t->add_dial(10, a));
  REQUIRE(t->add_dial(11, b));
  REQUIRE(t->establish(10, 1, a.get()));
  auto all = t->take_all();
  CHECK(all.size() == 2);
  CHECK(t->size() == 0);
  CHECK(t->find(1) == nullptr);
  CHECK_FALSE(t->add_dial(12, make_conn(ctx, 3, 12, t)));
  CHECK_FALSE(t->establish(11, 2, b.get()));
}
