#include "core/error/errc.h"

#include <catch2/catch.hpp>

TEST_CASE("konn errors are std::error_codes with readable messages", "[error]") {
  std::error_code ec = konn::Errc::NoAgentAvailable;
  CHECK(ec.category().name() == std::string("konn"));
  CHECK(ec.message() == "No agent available");
  CHECK(ec == konn::Errc::NoAgentAvailable);
  CHECK(ec != konn::Errc::DialTimeout);
  CHECK_FALSE(std::error_code(konn::Errc::Ok));
}
