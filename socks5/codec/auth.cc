#include "socks5/codec/auth.h"

namespace konn::socks5::codec {

UserPassParse parse_user_pass(Bytes in) {
  UserPassParse out;
  if (in.empty()) return out;
  if (in[0] != kAuthVersion) {
    out.status = ParseStatus::Invalid;
    return out;
  }
  if (in.size() < 2) return out;
  size_t ulen = in[1];
  if (ulen == 0) {
    out.status = ParseStatus::Invalid;
    return out;
  }
  if (in.size() < 2 + ulen + 1) return out;
  size_t plen = in[2 + ulen];
  size_t total = 3 + ulen + plen;
  if (in.size() < total) return out;
  out.value.user.assign(reinterpret_cast<const char*>(in.data() + 2), ulen);
  out.value.password.assign(reinterpret_cast<const char*>(in.data() + 3 + ulen), plen);
  out.status = ParseStatus::Complete;
  out.consumed = total;
  return out;
}

std::array<uint8_t, 2> encode_auth_status(uint8_t status) { return {kAuthVersion, status}; }

}  // namespace konn::socks5::codec
