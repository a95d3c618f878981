#include "core/tls/certificate_names.h"

#include <catch2/catch.hpp>

namespace {

// CN=node-a, subjectAltName DNS:node-a, DNS:node-a.example, IP:10.0.0.5, IP:fd00::5,
// URI:spiffe://x/y (self-signed, EC P-256, valid until 2126).
const char kCert[] = R"(-----BEGIN CERTIFICATE-----
MIIBxDCCAWqgAwIBAgIUWQXaRkYu9z2iDVBB2P9eqElBHU4wCgYIKoZIzj0EAwIw
ETEPMA0GA1UEAwwGbm9kZS1hMCAXDTI2MTEyNTAyMjIzMloYDzIxMjYxMTAxMDIy
MjMyWjARMQ8wDQYDVQQDDAZub2RlLWEwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNC
AASepQonWCK54S5p2saWx2COX9+QCem48dlG3XyUccYqvb85crXa+nhBg4jEVn+s
VGo3XRaiQ2DNTFJwfyGUM34eo4GdMIGaMB0GA1UdDgQWBBQiY/FDAVN+CdxVB+8I
M2EFBUv1yjAfBgNVHSMEGDAWgBQiY/FDAVN+CdxVB+8IM2EFBUv1yjAPBgNVHRMB
Af8EBTADAQH/MEcGA1UdEQRAMD6CBm5vZGUtYYIObm9kZS1hLmV4YW1wbGWHBAoA
AAWHEP0AAAAAAAAAAAAAAAAAAAWGDHNwaWZmZTovL3gveTAKBggqhkjOPQQDAgNI
ADBFAiBp2IjiWxi7fTFkP+ETVSekH9xw7fV0klZ2krXmPGVv7AIhAPFm7Ve0saaH
iCOMxFVfzw9ZdYJoAUIiKPEuEKd/GKgg
-----END CERTIFICATE-----
)";

}  // namespace

TEST_CASE("certificate names: CN, DNS and IP subjectAltNames", "[tls]") {
  auto names = konn::core::tls::certificate_names(kCert);
  REQUIRE(names);
  CHECK(names->common_name == "node-a");
  CHECK(names->dns == std::vector<std::string>{"node-a", "node-a.example"});
  REQUIRE(names->ips.size() == 2);
  CHECK(names->ips[0] == asio::ip::make_address("10.0.0.5"));
  CHECK(names->ips[1] == asio::ip::make_address("fd00::5"));
  CHECK_FALSE(konn::core::tls::certificate_names("not a certificate"));
}
