#include "core/config/uuid.h"

#include <cstdint>
#include <cstdio>
#include <random>

namespace konn::core::config {

std::string make_uuid_v4() {
  std::random_device rd;
  uint8_t b[16];
  for (auto& byte : b) byte = static_cast<uint8_t>(rd());
  b[6] = static_cast<uint8_t>((b[6] & 0x0F) | 0x40);  // version 4
  b[8] = static_cast<uint8_t>((b[8] & 0x3F) | 0x80);  // RFC 4122 variant
  char out[37];
  std::snprintf(out, sizeof(out),
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return out;
}

}  // namespace konn::core::config
