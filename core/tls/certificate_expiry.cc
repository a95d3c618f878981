#include "core/tls/certificate_expiry.h"

#include <cstdio>
#include <ctime>
#include <memory>

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

namespace konn::core::tls {

std::optional<CertificateExpiry> read_certificate_expiry(const std::string& path,
                                                         std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<CertificateExpiry> {
    if (error != nullptr) *error = why;
    return std::nullopt;
  };
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_file(path.c_str(), "r"), &BIO_free);
  if (!bio) return fail("cannot open " + path);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (!cert) return fail("no PEM certificate in " + path);
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert.get()), &tm) != 1) {
    return fail("unreadable notAfter in " + path);
  }
  CertificateExpiry out;
  out.not_after = std::chrono::system_clock::from_time_t(timegm(&tm));
  std::unique_ptr<BIO, decltype(&BIO_free)> mem(BIO_new(BIO_s_mem()), &BIO_free);
  if (mem &&
      X509_NAME_print_ex(mem.get(), X509_get_subject_name(cert.get()), 0, XN_FLAG_RFC2253) >= 0) {
    char* data = nullptr;
    long n = BIO_get_mem_data(mem.get(), &data);
    if (n > 0 && data != nullptr) out.subject.assign(data, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace konn::core::tls
