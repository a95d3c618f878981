#pragma once

#include <array>
#include <string>

#include "socks5/codec/parse_result.h"

namespace konn::socks5::codec {

inline constexpr uint8_t kAuthVersion = 0x01;
inline constexpr uint8_t kAuthSuccess = 0x00;
inline constexpr uint8_t kAuthFailure = 0x01;

// RFC 1929: VER=01 ULEN UNAME PLEN PASSWD. An empty user name (ULEN 0) or a wrong version is
// Invalid: the server answers failure and closes. An empty password is accepted by the parser
// (some clients send one) and simply fails verification.
struct UserPass {
  std::string user;
  std::string password;
};

struct UserPassParse {
  ParseStatus status = ParseStatus::NeedMore;
  size_t consumed = 0;
  UserPass value;
};

UserPassParse parse_user_pass(Bytes in);

// VER=01 STATUS
std::array<uint8_t, 2> encode_auth_status(uint8_t status);

}  // namespace konn::socks5::codec
