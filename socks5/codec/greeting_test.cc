#include "socks5/codec/greeting.h"

#include <catch2/catch.hpp>

using namespace konn::socks5::codec;

TEST_CASE("greeting parses at any split and reports what it consumed", "[codec]") {
  std::vector<uint8_t> msg{0x05, 0x02, 0x00, 0x02, 0xAA, 0xBB};  // + 2 bytes of what follows
  for (size_t n = 0; n < 4; ++n) {
    CHECK(parse_greeting(Bytes(msg.data(), n)).status == ParseStatus::NeedMore);
  }
  auto r = parse_greeting(msg);
  REQUIRE(r.status == ParseStatus::Complete);
  CHECK(r.consumed == 4);
  CHECK(r.value.methods == std::vector<uint8_t>{0x00, 0x02});
}

TEST_CASE("greeting rejects a wrong version and zero methods", "[codec]") {
  std::vector<uint8_t> socks4{0x04, 0x01, 0x00, 0x50};
  auto r = parse_greeting(socks4);
  CHECK(r.status == ParseStatus::Invalid);
  CHECK(r.error == GreetingError::WrongVersion);
  std::vector<uint8_t> http{'G', 'E', 'T'};
  CHECK(parse_greeting(http).error == GreetingError::WrongVersion);
  std::vector<uint8_t> zero{0x05, 0x00};
  auto z = parse_greeting(zero);
  CHECK(z.status == ParseStatus::Invalid);
  CHECK(z.error == GreetingError::ZeroMethods);
}

TEST_CASE("method choice follows the auth requirement", "[codec]") {
  Greeting both{{0x00, 0x02}};
  Greeting none{{0x00}};
  Greeting other{{0x01, 0x80}};
  CHECK(choose_method(both, false) == kMethodNoAuth);
  CHECK(choose_method(both, true) == kMethodUserPass);
  CHECK(choose_method(none, true) == kMethodNoAcceptable);
  CHECK(choose_method(other, false) == kMethodNoAcceptable);
  CHECK(encode_method_selection(0xFF) == std::array<uint8_t, 2>{0x05, 0xFF});
}
