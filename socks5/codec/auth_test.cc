#include "socks5/codec/auth.h"

#include <catch2/catch.hpp>

using namespace konn::socks5::codec;

TEST_CASE("user/pass parses at any split", "[codec]") {
  std::vector<uint8_t> msg{0x01, 5, 'a', 'l', 'i', 'c', 'e', 3, 'p', 'w', 'd', 0x05};
  for (size_t n = 0; n < msg.size() - 1; ++n) {
    CHECK(parse_user_pass(Bytes(msg.data(), n)).status == ParseStatus::NeedMore);
  }
  auto r = parse_user_pass(msg);
  REQUIRE(r.status == ParseStatus::Complete);
  CHECK(r.consumed == msg.size() - 1);
  CHECK(r.value.user == "alice");
  CHECK(r.value.password == "pwd");
}

TEST_CASE("user/pass rejects a wrong version and an empty user, accepts an empty password",
          "[codec]") {
  std::vector<uint8_t> v5{0x05, 1, 'a', 1, 'b'};
  CHECK(parse_user_pass(v5).status == ParseStatus::Invalid);
  std::vector<uint8_t> empty_user{0x01, 0, 1, 'b'};
  CHECK(parse_user_pass(empty_user).status == ParseStatus::Invalid);
  std::vector<uint8_t> empty_pw{0x01, 1, 'a', 0};
  auto r = parse_user_pass(empty_pw);
  REQUIRE(r.status == ParseStatus::Complete);
  CHECK(r.value.password.empty());
  CHECK(encode_auth_status(kAuthFailure) == std::array<uint8_t, 2>{0x01, 0x01});
}
