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

// Maps upstream's --tls-min-version values to the OpenSSL protocol version konn enforces: ""
// (default) and "VersionTLS12" give TLS1_2_VERSION, "VersionTLS13" TLS1_3_VERSION. Upstream
// accepts VersionTLS10 and VersionTLS11 with a warning; konn accepts them too but never
// negotiates below TLS 1.2, so they give TLS1_2_VERSION (see min_version_warning). Returns 0 and
// appends to `errors` for any other value.
int openssl_min_version(const std::string& go_name, std::vector<std::string>* errors);

// The warning to log at start-up for a --tls-min-version that konn raises to TLS 1.2
// (VersionTLS10, VersionTLS11); "" for the others.
std::string min_version_warning(const std::string& go_name);

}  // namespace konn::core::tls
