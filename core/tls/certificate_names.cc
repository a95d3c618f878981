#include "core/tls/certificate_names.h"

#include <memory>

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace konn::core::tls {

std::optional<CertificateNames> certificate_names(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  if (!bio) return std::nullopt;
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (!cert) return std::nullopt;
  return certificate_names(cert.get());
}

CertificateNames certificate_names(const X509* cert) {
  CertificateNames out;
  char cn[256] = {};
  int n =
      X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
  if (n > 0) out.common_name.assign(cn, static_cast<size_t>(n));
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    if (name->type == GEN_DNS) {
      const ASN1_IA5STRING* s = name->d.dNSName;
      out.dns.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                           static_cast<size_t>(ASN1_STRING_length(s)));
    } else if (name->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = name->d.iPAddress;
      const unsigned char* bytes = ASN1_STRING_get0_data(s);
      if (ASN1_STRING_length(s) == 4) {
        asio::ip::address_v4::bytes_type b;
        std::copy(bytes, bytes + 4, b.begin());
        out.ips.emplace_back(asio::ip::address_v4(b));
      } else if (ASN1_STRING_length(s) == 16) {
        asio::ip::address_v6::bytes_type b;
        std::copy(bytes, bytes + 16, b.begin());
        out.ips.emplace_back(asio::ip::address_v6(b));
      }
    }
  }
  GENERAL_NAMES_free(names);
  return out;
}

}  // namespace konn::core::tls
