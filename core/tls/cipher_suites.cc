#include "core/tls/cipher_suites.h"

#include <map>

#include <openssl/ssl.h>

namespace konn::core::tls {
namespace {

const std::map<std::string, std::string>& secure_suites() {
  static const std::map<std::string, std::string> m = {
      {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"},
      {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"},
      {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"},
      {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"},
      {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"},
      {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "ECDHE-ECDSA-CHACHA20-POLY1305"},
      {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"},
      {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "ECDHE-RSA-CHACHA20-POLY1305"},
      {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA-AES128-SHA"},
      {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"},
      {"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA"},
      {"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"},
      {"TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"},
      {"TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"},
      {"TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"},
      {"TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA"},
      // TLS 1.3: valid names, not configurable.
      {"TLS_AES_128_GCM_SHA256", ""},
      {"TLS_AES_256_GCM_SHA384", ""},
      {"TLS_CHACHA20_POLY1305_SHA256", ""},
  };
  return m;
}

bool insecure(const std::string& name) {
  static const char* kInsecure[] = {
      "TLS_RSA_WITH_RC4_128_SHA",        "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
      "TLS_RSA_WITH_AES_128_CBC_SHA256", "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
      "TLS_ECDHE_RSA_WITH_RC4_128_SHA",  "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
      "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256"};
  for (const char* i : kInsecure) {
    if (name == i) return true;
  }
  return false;
}

}  // namespace

std::string openssl_cipher_list(const std::vector<std::string>& go_names,
                                std::vector<std::string>* errors) {
  std::string out;
  for (const auto& name : go_names) {
    if (insecure(name)) {
      errors->push_back("--cipher-suites: " + name + " is insecure and not allowed");
      continue;
    }
    auto it = secure_suites().find(name);
    if (it == secure_suites().end()) {
      errors->push_back("--cipher-suites: unknown cipher suite " + name);
      continue;
    }
    if (it->second.empty()) continue;
    if (out.find(it->second) != std::string::npos) continue;
    if (!out.empty()) out += ':';
    out += it->second;
  }
  return out;
}

int openssl_min_version(const std::string& go_name, std::vector<std::string>* errors) {
  if (go_name.empty() || go_name == "VersionTLS12") return TLS1_2_VERSION;
  if (go_name == "VersionTLS13") return TLS1_3_VERSION;
  if (go_name == "VersionTLS10" || go_name == "VersionTLS11") return TLS1_2_VERSION;
  errors->push_back("--tls-min-version: unknown version \"" + go_name +
                    "\" (want VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13)");
  return 0;
}

std::string min_version_warning(const std::string& go_name) {
  if (go_name != "VersionTLS10" && go_name != "VersionTLS11") return {};
  return "--tls-min-version=" + go_name +
         " is below TLS 1.2 and insecure (RFC 8996); konn never negotiates below TLS 1.2, so "
         "TLS 1.2 is the floor";
}

}  // namespace konn::core::tls
