#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <openssl/evp.h>

#include "test-client/tunnel.h"

namespace konn::e2e {

// Incremental SHA-256 (OpenSSL EVP), lowercase hex result.
class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  std::string hex();

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

// `n` pseudo-random bytes, different for each seed.
std::string random_bytes(size_t n, uint64_t seed);

// Reads until `n` bytes arrived, the tunnel ended, or `idle` passed without data.
std::string read_exactly(testclient::Tunnel& t, size_t n, std::chrono::milliseconds idle);

}  // namespace konn::e2e
