#pragma once

#include <system_error>
#include <vector>

#include <asio/ip/address.hpp>

#include "socks5/codec/address.h"

namespace konn::socks5::codec {

// REP values (RFC 1928 section 6).
enum class ReplyCode : uint8_t {
  Succeeded = 0x00,
  GeneralFailure = 0x01,
  NotAllowed = 0x02,
  NetworkUnreachable = 0x03,
  HostUnreachable = 0x04,
  ConnectionRefused = 0x05,
  TtlExpired = 0x06,  // also used for "connect timed out", as every server does
  CommandNotSupported = 0x07,
  AddressTypeNotSupported = 0x08,
};

const char* to_string(ReplyCode c);

// VER REP RSV ATYP BND.ADDR BND.PORT (10 bytes for IPv4, 22 for IPv6).
std::vector<uint8_t> encode_reply(ReplyCode code, const asio::ip::address& bound, uint16_t port);
// A failure reply carries 0.0.0.0:0.
std::vector<uint8_t> encode_failure(ReplyCode code);

// The reply for a failed outbound connect or resolution:
//   refused → 05, network unreachable/down → 03, host unreachable → 04, timeout → 06,
//   name not found → 04, resolver failure (SERVFAIL, DNS timeout) → 01, anything else → 01.
ReplyCode reply_for_error(std::error_code ec);

}  // namespace konn::socks5::codec
