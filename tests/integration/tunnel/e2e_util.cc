#include "tests/integration/tunnel/e2e_util.h"

namespace konn::e2e {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
  EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr);
}

void Sha256::update(std::string_view bytes) {
  EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size());
}

std::string Sha256::hex() {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx_.get(), d, &len);
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += digits[d[i] >> 4];
    out += digits[d[i] & 15];
  }
  return out;
}

std::string random_bytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  size_t i = 0;
  while (i < n) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    for (int k = 0; k < 8 && i < n; ++k, ++i) s[i] = static_cast<char>(x >> (k * 8));
  }
  return s;
}

std::string read_exactly(testclient::Tunnel& t, size_t n, std::chrono::milliseconds idle) {
  std::string got;
  std::string chunk;
  while (got.size() < n) {
    if (t.read_for(&chunk, idle) != testclient::Tunnel::ReadStatus::Data) break;
    got += chunk;
  }
  return got;
}

}  // namespace konn::e2e
