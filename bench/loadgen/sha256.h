#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace konn::bench {

// Incremental SHA-256 (OpenSSL EVP): what the soak test compares the two ends of a tunnel with.
class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t n);
  // The digest of everything given so far; the object then starts over.
  Digest finish();

  static std::string hex(const Digest& d);

 private:
  void* ctx_;  // EVP_MD_CTX, kept opaque so OpenSSL's headers stay out of this one
};

}  // namespace konn::bench
