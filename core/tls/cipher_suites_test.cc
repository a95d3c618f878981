#include "core/tls/cipher_suites.h"

#include <openssl/ssl.h>

#include <catch2/catch.hpp>

using namespace konn::core::tls;

TEST_CASE("Go cipher suite names map to OpenSSL's, insecure and unknown ones are refused",
          "[tls]") {
  std::vector<std::string> errors;
  auto list = openssl_cipher_list({"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                                   "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "TLS_AES_128_GCM_SHA256"},
                                  &errors);
  CHECK(errors.empty());
  CHECK(list == "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305");
  openssl_cipher_list({"TLS_RSA_WITH_RC4_128_SHA", "TLS_MADE_UP"}, &errors);
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].find("insecure") != std::string::npos);
  CHECK(errors[1].find("TLS_MADE_UP") != std::string::npos);
  // Every mapped name is one OpenSSL knows.
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  CHECK(SSL_CTX_set_cipher_list(ctx, list.c_str()) == 1);
  SSL_CTX_free(ctx);
}

TEST_CASE("TLS minimum versions", "[tls]") {
  std::vector<std::string> errors;
  CHECK(openssl_min_version("", &errors) == TLS1_2_VERSION);
  CHECK(openssl_min_version("VersionTLS12", &errors) == TLS1_2_VERSION);
  CHECK(openssl_min_version("VersionTLS13", &errors) == TLS1_3_VERSION);
  // Upstream accepts 1.0 and 1.1 with a warning; konn accepts them and keeps TLS 1.2 the floor.
  CHECK(openssl_min_version("VersionTLS10", &errors) == TLS1_2_VERSION);
  CHECK(openssl_min_version("VersionTLS11", &errors) == TLS1_2_VERSION);
  CHECK(errors.empty());
  CHECK(min_version_warning("VersionTLS10").find("below TLS 1.2") != std::string::npos);
  CHECK(min_version_warning("VersionTLS11").find("TLS 1.2 is the floor") != std::string::npos);
  CHECK(min_version_warning("VersionTLS12").empty());
  CHECK(min_version_warning("VersionTLS13").empty());
  CHECK(openssl_min_version("TLS9", &errors) == 0);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].find("unknown version \"TLS9\"") != std::string::npos);
}
