#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace konn::core::tls {

// What a status page and the expiry gauge show of one PEM certificate file: its first
// certificate's subject (one line, OpenSSL's RFC 2253 form) and the end of its validity.
struct CertificateExpiry {
  std::string subject;
  std::chrono::system_clock::time_point not_after;
};

// Reads the first certificate of the PEM file at `path`. nullopt, with `error` set when given,
// when the file cannot be read or holds no certificate. Never throws.
std::optional<CertificateExpiry> read_certificate_expiry(const std::string& path,
                                                         std::string* error = nullptr);

}  // namespace konn::core::tls
