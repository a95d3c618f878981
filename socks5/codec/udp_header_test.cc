#include "socks5/codec/udp_header.h"

#include <catch2/catch.hpp>

using namespace konn::socks5::codec;

TEST_CASE("udp datagram header round-trips", "[codec]") {
  auto hdr = encode_udp_header(asio::ip::make_address("10.0.0.2"), 53);
  std::vector<uint8_t> dgram = hdr;
  dgram.insert(dgram.end(), {'h', 'i'});
  auto r = parse_udp_datagram(dgram);
  REQUIRE(r.status == ParseStatus::Complete);
  CHECK(r.value.frag == 0);
  CHECK(r.value.header_size == hdr.size());
  CHECK(r.value.destination.to_string() == "10.0.0.2:53");
}

TEST_CASE("udp datagram with a domain, a fragment number, or truncated", "[codec]") {
  std::vector<uint8_t> d{0, 0, 1, 0x03, 3, 'a', '.', 'b', 0, 7, 'x'};
  auto r = parse_udp_datagram(d);
  REQUIRE(r.status == ParseStatus::Complete);
  CHECK(r.value.frag == 1);
  CHECK(r.value.destination.host == "a.b");
  CHECK(r.value.header_size == 10);
  CHECK(parse_udp_datagram(Bytes(d.data(), 6)).status == ParseStatus::Invalid);
}
