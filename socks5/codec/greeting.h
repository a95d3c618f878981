#pragma once

#include <array>
#include <vector>

#include "socks5/codec/parse_result.h"

namespace konn::socks5::codec {

// Method identifiers (RFC 1928 section 3).
inline constexpr uint8_t kMethodNoAuth = 0x00;
inline constexpr uint8_t kMethodUserPass = 0x02;
inline constexpr uint8_t kMethodNoAcceptable = 0xFF;
inline constexpr uint8_t kSocksVersion = 0x05;

enum class GreetingError {
  None,
  WrongVersion,  // first byte is not 5 (a SOCKS4 or HTTP client): close without answering
  ZeroMethods,   // NMETHODS = 0: no method can be chosen, answer FF and close
};

// VER NMETHODS METHODS[NMETHODS]
struct Greeting {
  std::vector<uint8_t> methods;
};

struct GreetingParse {
  ParseStatus status = ParseStatus::NeedMore;
  size_t consumed = 0;
  GreetingError error = GreetingError::None;
  Greeting value;
};

// Parses the client's method-selection message from the start of `in`.
GreetingParse parse_greeting(Bytes in);

// The method we select: 02 when credentials are required and offered, 00 when no credentials
// are required and it is offered, FF otherwise.
uint8_t choose_method(const Greeting& g, bool require_auth);

// VER METHOD
std::array<uint8_t, 2> encode_method_selection(uint8_t method);

}  // namespace konn::socks5::codec
