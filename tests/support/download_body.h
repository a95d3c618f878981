#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace konn::testsupport {

// The body of the TLS fake apiserver's GET /download?bytes=N, for checking it by hash: piece k
// (kDownloadPiece bytes each, the last one cut at N) is a fixed pseudo-random block whose first 8
// bytes are k, little-endian. A piece lost, repeated or moved changes the hash, and making it
// costs the fixture one 8-byte store per piece.
constexpr size_t kDownloadPiece = 256 * 1024;

// Writes piece `k` into `out` (kDownloadPiece bytes).
inline void download_piece(uint64_t k, char* out) {
  static const std::string block = [] {
    std::string b(kDownloadPiece, '\0');
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    for (auto& c : b) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      c = static_cast<char>(x >> 56);
    }
    return b;
  }();
  std::memcpy(out, block.data(), kDownloadPiece);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((k >> (8 * i)) & 0xff);
}

}  // namespace konn::testsupport
