#include "core/admin/top_n.h"

#include <random>
#include <vector>

#include <catch2/catch.hpp>

using konn::core::admin::best_of;
using konn::core::admin::TopN;

TEST_CASE("TopN keeps the best n of a stream, best first", "[admin]") {
  std::vector<int> values(1000);
  for (int i = 0; i < 1000; ++i) values[static_cast<size_t>(i)] = i;
  std::shuffle(values.begin(), values.end(), std::mt19937(7));
  auto greater = [](int a, int b) { return a > b; };
  TopN<int, decltype(greater)> top(5, greater);
  for (int v : values) top.offer(v);
  CHECK(std::move(top).sorted() == std::vector<int>{999, 998, 997, 996, 995});

  TopN<int, decltype(greater)> none(0, greater);
  none.offer(1);
  CHECK(std::move(none).sorted().empty());
}

TEST_CASE("best_of points at the best rows and keeps fewer when there are fewer", "[admin]") {
  struct Row {
    int bytes;
  };
  std::vector<Row> rows{{3}, {10}, {1}, {7}};
  auto busier = [](const Row& a, const Row& b) { return a.bytes > b.bytes; };
  auto two = best_of(rows, 2, busier);
  REQUIRE(two.size() == 2);
  CHECK(two[0] == &rows[1]);
  CHECK(two[1] == &rows[3]);
  CHECK(best_of(rows, 20, busier).size() == 4);
}
