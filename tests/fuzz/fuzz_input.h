#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace konn::fuzz {

// Takes typed values off the front of a fuzz input; past the end every value is 0 and every
// string empty, so a target never reads outside the input. (clang's FuzzedDataProvider does the
// same, but the corpus-replay build is gcc's.)
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return size_ - pos_; }

  uint8_t byte() { return empty() ? 0 : data_[pos_++]; }
  uint16_t u16() { return static_cast<uint16_t>(byte() << 8 | byte()); }
  // A value in [0, n) (n > 0).
  unsigned pick(unsigned n) { return byte() % n; }
  bool flag() { return (byte() & 1) != 0; }

  // Up to `max` bytes: a length byte, then that many bytes (fewer at the end of the input).
  std::string bytes(size_t max = 255) {
    size_t n = std::min<size_t>(byte(), max);
    n = std::min(n, remaining());
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }
  // Everything left.
  std::string_view rest() {
    std::string_view out(reinterpret_cast<const char*>(data_ + pos_), remaining());
    pos_ = size_;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// The one `T` of a fuzz process (a daemon started once for every input), made on first use and
// destroyed at exit before static destructors run: atexit handlers run in reverse order of
// registration, after spdlog's registry and gRPC's globals exist, so the daemon's threads end
// before what they log to and call into.
template <typename T>
T& process_fixture() {
  static T* instance = nullptr;
  if (instance == nullptr) {
    instance = new T();
    std::atexit([] {
      delete instance;
      instance = nullptr;
    });
  }
  return *instance;
}

// A fuzz target's own check: a broken invariant is a finding, reported and aborted on in every
// build (assert() would vanish under NDEBUG).
#define KONN_FUZZ_CHECK(cond)                                                                \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (false)

}  // namespace konn::fuzz
