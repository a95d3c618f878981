#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace konn::bench {

// The bytes every bulk transfer carries: the byte at stream offset i is pattern(i % kPeriod).
// kPeriod is prime, so it never lines up with a chunk or DATA packet size, and a lost,
// duplicated or reordered chunk fails check(). Spans are served from one precomputed buffer, so
// producing and checking cost a memcpy/memcmp, not a loop per byte.
class Pattern {
 public:
  static constexpr size_t kPeriod = 65521;
  // Longest span at() may be asked for.
  static constexpr size_t kMaxSpan = size_t{1} << 20;

  static const Pattern& get() {
    static const Pattern p;
    return p;
  }

  // The kMaxSpan bytes starting at stream offset `offset`.
  const char* at(uint64_t offset) const { return buf_.data() + offset % kPeriod; }

  // Whether `n` bytes at `data` are the pattern's bytes from stream offset `offset`.
  bool check(uint64_t offset, const char* data, size_t n) const {
    while (n > 0) {
      size_t span = n < kMaxSpan ? n : kMaxSpan;
      if (std::memcmp(at(offset), data, span) != 0) return false;
      offset += span;
      data += span;
      n -= span;
    }
    return true;
  }

 private:
  Pattern() : buf_(kPeriod + kMaxSpan) {
    uint32_t x = 0x9e3779b9U;
    for (size_t i = 0; i < kPeriod; ++i) {
      x = x * 1664525U + 1013904223U;  // LCG: cheap and not periodic below 2^32
      buf_[i] = static_cast<char>(x >> 24);
    }
    for (size_t i = kPeriod; i < buf_.size(); ++i) buf_[i] = buf_[i % kPeriod];
  }
  std::vector<char> buf_;
};

}  // namespace konn::bench
