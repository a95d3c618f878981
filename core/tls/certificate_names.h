#pragma once

#include <optional>
#include <string>
#include <vector>

#include <asio/ip/address.hpp>

#include <openssl/x509.h>

namespace konn::core::tls {

// The names a certificate vouches for: its subject's common name and its subjectAltName DNS
// names and IP addresses (what a peer's authenticated identity can prove).
struct CertificateNames {
  std::string common_name;
  std::vector<std::string> dns;
  std::vector<asio::ip::address> ips;
};

// Reads the first certificate of `pem`. nullopt when it does not parse.
std::optional<CertificateNames> certificate_names(const std::string& pem);
// The names of a certificate already decoded (a TLS peer's: no second decoding).
CertificateNames certificate_names(const X509* cert);

}  // namespace konn::core::tls
