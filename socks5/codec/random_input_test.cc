// Randomised robustness checks for every parser (a stand-in until tests/fuzz gets libFuzzer
// targets): no input crashes them, `consumed` never exceeds the input, and a Complete parse is
// stable under every prefix (NeedMore before the end, the same result at the end).

#include <random>

#include <catch2/catch.hpp>

#include "socks5/codec/auth.h"
#include "socks5/codec/greeting.h"
#include "socks5/codec/request.h"
#include "socks5/codec/udp_header.h"

using namespace konn::socks5::codec;

namespace {

std::vector<uint8_t> random_message(std::mt19937& rng) {
  std::uniform_int_distribution<int> len(0, 300);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> v(static_cast<size_t>(len(rng)));
  for (auto& b : v) b = static_cast<uint8_t>(byte(rng));
  // Bias towards plausible headers so the deeper branches run too.
  if (!v.empty() && rng() % 2 == 0) v[0] = 0x05;
  if (v.size() > 3 && rng() % 2 == 0) v[3] = static_cast<uint8_t>(std::vector<int>{1, 3, 4}[rng() % 3]);
  if (v.size() > 4 && v[3] == 3 && rng() % 2 == 0) v[4] = static_cast<uint8_t>(rng() % 20);
  return v;
}

template <typename Parse>
void check_prefix_stable(const std::vector<uint8_t>& msg, Parse parse) {
  auto full = parse(Bytes(msg));
  REQUIRE(full.consumed <= msg.size());
  if (full.status != ParseStatus::Complete) return;
  for (size_t n = 0; n < full.consumed; ++n) {
    auto part = parse(Bytes(msg.data(), n));
    REQUIRE(part.status != ParseStatus::Complete);
  }
  auto exact = parse(Bytes(msg.data(), full.consumed));
  REQUIRE(exact.status == ParseStatus::Complete);
  REQUIRE(exact.consumed == full.consumed);
}

}  // namespace

// reliability: socks5 | 20 000 random greetings, requests, auth messages and UDP headers | no
// reliability+: crash, never reads past the input, same parse for every prefix | n/a (parsers only)
// reliability+: | the parsers
TEST_CASE("parsers survive random input and are prefix-stable", "[codec]") {
  std::mt19937 rng(20261122);
  for (int i = 0; i < 20000; ++i) {
    auto msg = random_message(rng);
    check_prefix_stable(msg, parse_greeting);
    check_prefix_stable(msg, parse_request);
    auto auth = msg;
    if (!auth.empty()) auth[0] = 0x01;
    check_prefix_stable(auth, parse_user_pass);
    auto udp = parse_udp_datagram(Bytes(msg));
    if (udp.status == ParseStatus::Complete) REQUIRE(udp.value.header_size <= msg.size());
  }
}
