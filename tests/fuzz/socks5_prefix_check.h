#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "socks5/codec/address.h"
#include "socks5/codec/parse_result.h"
#include "tests/fuzz/fuzz_input.h"

namespace konn::fuzz {

// The contract of every incremental SOCKS5 parser, which the session relies on when a message
// arrives split over reads or coalesced with the first data bytes: `consumed` never exceeds the
// input; a Complete parse gives the same result on exactly its consumed bytes; and no strict
// prefix of a Complete message is Complete already (else the session would act on half of it).
template <typename Parse>
void check_incremental_parser(const uint8_t* data, size_t size, Parse parse) {
  using socks5::codec::Bytes;
  using socks5::codec::ParseStatus;
  if (size > 1024) return;  // messages are at most 513 bytes; keep the prefix walk cheap
  auto full = parse(Bytes(data, size));
  KONN_FUZZ_CHECK(full.consumed <= size);
  if (full.status != ParseStatus::Complete) return;
  KONN_FUZZ_CHECK(full.consumed > 0);
  auto exact = parse(Bytes(data, full.consumed));
  KONN_FUZZ_CHECK(exact.status == ParseStatus::Complete);
  KONN_FUZZ_CHECK(exact.consumed == full.consumed);
  for (size_t n = 0; n < full.consumed; ++n) {
    KONN_FUZZ_CHECK(parse(Bytes(data, n)).status != ParseStatus::Complete);
  }
}

// "host:port" of an address, an IPv4-mapped IPv6 address written as the IPv4 one: the codec
// writes mapped addresses back as IPv4 (ATYP 01), as replies carry them.
inline std::string unmapped(const socks5::codec::Address& a) {
  if (a.is_domain || !a.ip.is_v6() || !a.ip.to_v6().is_v4_mapped()) return a.to_string();
  auto v4 = asio::ip::make_address_v4(asio::ip::v4_mapped, a.ip.to_v6());
  return v4.to_string() + ":" + std::to_string(a.port);
}

}  // namespace konn::fuzz
