#pragma once

#include <string>
#include <vector>

#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>

#include "socks5/codec/parse_result.h"

namespace konn::socks5::codec {

// ATYP values (RFC 1928 section 4).
inline constexpr uint8_t kAtypIpv4 = 0x01;
inline constexpr uint8_t kAtypDomain = 0x03;
inline constexpr uint8_t kAtypIpv6 = 0x04;

// DST.ADDR DST.PORT as sent by the client: an IP address or a domain name (socks5h).
struct Address {
  bool is_domain = false;
  asio::ip::address ip;  // when !is_domain
  std::string host;      // when is_domain (1..255 bytes, never empty)
  uint16_t port = 0;

  // "10.0.0.1:80", "[::1]:443", "example.com:443"
  std::string to_string() const;
  // The host part alone ("example.com", "::1").
  std::string host_text() const;
};

enum class AddressError {
  None,
  BadType,      // unknown ATYP: reply 08
  EmptyDomain,  // domain of length 0: reply 01 (general failure; there is no name to resolve)
};

struct AddressParse {
  ParseStatus status = ParseStatus::NeedMore;
  size_t consumed = 0;
  AddressError error = AddressError::None;
  Address value;
};

// Parses ATYP ADDR PORT from the start of `in`.
AddressParse parse_address(Bytes in);

// Appends ATYP ADDR PORT for an IP endpoint (IPv4-mapped IPv6 is written as IPv4).
void append_endpoint(std::vector<uint8_t>& out, const asio::ip::address& ip, uint16_t port);
// Appends ATYP ADDR PORT for an Address (domain kept as a domain).
void append_address(std::vector<uint8_t>& out, const Address& a);

}  // namespace konn::socks5::codec
