#include "socks5/codec/greeting.h"

#include <algorithm>

namespace konn::socks5::codec {

GreetingParse parse_greeting(Bytes in) {
  GreetingParse out;
  if (in.empty()) return out;
  if (in[0] != kSocksVersion) {
    out.status = ParseStatus::Invalid;
    out.error = GreetingError::WrongVersion;
    return out;
  }
  if (in.size() < 2) return out;
  size_t n = in[1];
  if (n == 0) {
    out.status = ParseStatus::Invalid;
    out.error = GreetingError::ZeroMethods;
    out.consumed = 2;
    return out;
  }
  if (in.size() < 2 + n) return out;
  out.value.methods.assign(in.begin() + 2, in.begin() + 2 + static_cast<long>(n));
  out.status = ParseStatus::Complete;
  out.consumed = 2 + n;
  return out;
}

uint8_t choose_method(const Greeting& g, bool require_auth) {
  uint8_t wanted = require_auth ? kMethodUserPass : kMethodNoAuth;
  bool offered = std::find(g.methods.begin(), g.methods.end(), wanted) != g.methods.end();
  return offered ? wanted : kMethodNoAcceptable;
}

std::array<uint8_t, 2> encode_method_selection(uint8_t method) { return {kSocksVersion, method}; }

}  // namespace konn::socks5::codec
