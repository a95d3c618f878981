#pragma once

#include <cstddef>
#include <cstdint>

namespace konn::bench {

// A reproducible byte stream: the same seed gives the same bytes, so the destination and the
// client of the soak test produce and check a download (or an echo's upload) without sending or
// storing it. splitmix64, eight bytes per step; read sequentially with fill().
class SeededBytes {
 public:
  explicit SeededBytes(uint64_t seed) : state_(seed) {}

  // The next n bytes of the stream.
  void fill(char* p, size_t n) {
    while (n > 0 && used_ < 8) {
      *p++ = static_cast<char>(word_ >> (8 * used_++));
      --n;
    }
    while (n >= 8) {
      uint64_t w = next();
      for (int i = 0; i < 8; ++i) *p++ = static_cast<char>(w >> (8 * i));  // one store on x86
      n -= 8;
    }
    if (n > 0) {
      word_ = next();
      used_ = 0;
      while (n > 0) {
        *p++ = static_cast<char>(word_ >> (8 * used_++));
        --n;
      }
    }
  }

 private:
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  uint64_t state_;
  uint64_t word_ = 0;
  unsigned used_ = 8;  // bytes of word_ already handed out
};

}  // namespace konn::bench
