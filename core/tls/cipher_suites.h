#pragma once

#include <string>
#include <vector>

namespace konn::core::tls {

// Translates Go crypto/tls cipher suite names (what upstream's --cipher-suites takes) into an
// OpenSSL cipher list for TLS 1.2 ("ECDHE-RSA-AES128-GCM-SHA256:..."). TLS 1.3 suite names are
// accepted and contribute nothing (Go ignores them too: TLS 1.3 suites are not configurable).
// Unknown names and the suites Go lists as insecure (RC4, 3DES, CBC-SHA256) are errors, each
// appended to `errors` naming the suite.
std::string openssl_cipher_list(const std::vector<std::string>& go_names,
                                std::vector<std::string>* errors);

// Maps upstream's --tls-min-version values to OpenSSL protocol versions: "" (default) and
// "VersionTLS12" give TLS1_2_VERSION, "VersionTLS13" TLS1_3_VERSION; VersionTLS10/11 are refused
// (konn never negotiates below TLS 1.2). Returns 0 and appends to `errors` otherwise.
int openssl_min_version(const std::string& go_name, std::vector<std::string>* errors);

}  // namespace konn::core::tls
