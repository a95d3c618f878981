// UDP ASSOCIATE datagram header (RFC 1928 section 7), as the relay reads each client datagram.

#include "socks5/codec/udp_header.h"
#include "tests/fuzz/socks5_prefix_check.h"

using namespace konn::socks5::codec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto u = parse_udp_datagram(Bytes(data, size));
  if (u.status == ParseStatus::Complete) {
    KONN_FUZZ_CHECK(u.value.header_size <= size);
    KONN_FUZZ_CHECK(u.value.header_size >= 4 + 2 + 1);
    if (!u.value.destination.is_domain) {
      // The header of a reply from that address parses back to it.
      auto h = encode_udp_header(u.value.destination.ip, u.value.destination.port);
      auto back = parse_udp_datagram(Bytes(h.data(), h.size()));
      KONN_FUZZ_CHECK(back.status == ParseStatus::Complete);
      KONN_FUZZ_CHECK(back.value.header_size == h.size());
      KONN_FUZZ_CHECK(konn::fuzz::unmapped(back.value.destination) ==
                      konn::fuzz::unmapped(u.value.destination));
    }
  }
  return 0;
}
