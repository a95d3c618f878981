// SOCKS5 method-selection message (RFC 1928 section 3), as the session reads it from a client.

#include <algorithm>

#include "socks5/codec/greeting.h"
#include "tests/fuzz/socks5_prefix_check.h"

using namespace konn::socks5::codec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  konn::fuzz::check_incremental_parser(data, size, parse_greeting);
  auto g = parse_greeting(Bytes(data, size));
  if (g.status == ParseStatus::Complete) {
    KONN_FUZZ_CHECK(!g.value.methods.empty());
    for (bool require_auth : {false, true}) {
      uint8_t m = choose_method(g.value, require_auth);
      // Never a method the client did not offer, and never "no auth" when auth is required.
      KONN_FUZZ_CHECK(m == kMethodNoAcceptable ||
                      std::find(g.value.methods.begin(), g.value.methods.end(), m) !=
                          g.value.methods.end());
      KONN_FUZZ_CHECK(!(require_auth && m == kMethodNoAuth));
    }
  }
  return 0;
}
