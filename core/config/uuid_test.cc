#include "core/config/uuid.h"

#include <regex>

#include <catch2/catch.hpp>

TEST_CASE("UUIDs are version 4, canonical and distinct", "[config]") {
  std::regex form("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
  auto a = konn::core::config::make_uuid_v4();
  auto b = konn::core::config::make_uuid_v4();
  CHECK(std::regex_match(a, form));
  CHECK(a != b);
}
