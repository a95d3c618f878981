// SOCKS5 request (RFC 1928 section 4): VER CMD RSV ATYP DST.ADDR DST.PORT.

#include <vector>

#include "socks5/codec/request.h"
#include "tests/fuzz/socks5_prefix_check.h"

using namespace konn::socks5::codec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  konn::fuzz::check_incremental_parser(data, size, parse_request);
  auto r = parse_request(Bytes(data, size));
  if (r.status == ParseStatus::Invalid) {
    // Every refusal is a reply code the RFC defines, or 0 (close without answering).
    KONN_FUZZ_CHECK(r.reply_code <= 0x08);
  }
  if (r.status == ParseStatus::Complete) {
    const Address& a = r.value.destination;
    KONN_FUZZ_CHECK(!a.is_domain || (!a.host.empty() && a.host.size() <= 255));
    // The address written back (as in a reply) parses to the same address.
    std::vector<uint8_t> out;
    append_address(out, a);
    auto again = parse_address(Bytes(out.data(), out.size()));
    KONN_FUZZ_CHECK(again.status == ParseStatus::Complete);
    KONN_FUZZ_CHECK(again.consumed == out.size());
    // Written as IPv4 when it is an IPv4-mapped IPv6 address (as replies carry it); the rules and
    // the dialer judge such a destination as the IPv4 address too.
    KONN_FUZZ_CHECK(konn::fuzz::unmapped(again.value) == konn::fuzz::unmapped(a));
    (void)to_string(r.value.command);
  }
  return 0;
}
