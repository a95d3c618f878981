// RFC 1929 username/password request, as the session reads it after selecting method 02.

#include "socks5/codec/auth.h"
#include "tests/fuzz/socks5_prefix_check.h"

using namespace konn::socks5::codec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  konn::fuzz::check_incremental_parser(data, size, parse_user_pass);
  auto a = parse_user_pass(Bytes(data, size));
  if (a.status == ParseStatus::Complete) {
    // VER ULEN UNAME PLEN PASSWD: the fields account for every consumed byte.
    KONN_FUZZ_CHECK(!a.value.user.empty());
    KONN_FUZZ_CHECK(a.consumed == 3 + a.value.user.size() + a.value.password.size());
  }
  return 0;
}
