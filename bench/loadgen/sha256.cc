#include "bench/loadgen/sha256.h"

#include <stdexcept>

#include <openssl/evp.h>

namespace konn::bench {

namespace {

EVP_MD_CTX* md(void* p) { return static_cast<EVP_MD_CTX*>(p); }

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(md(ctx_), EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("EVP sha256 init failed");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(md(ctx_)); }

void Sha256::update(const void* data, size_t n) {
  if (n > 0) EVP_DigestUpdate(md(ctx_), data, n);
}

Sha256::Digest Sha256::finish() {
  Digest d{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(md(ctx_), d.data(), &len);
  EVP_DigestInit_ex(md(ctx_), EVP_sha256(), nullptr);
  return d;
}

std::string Sha256::hex(const Digest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t b : d) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace konn::bench
