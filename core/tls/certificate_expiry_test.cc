#include "core/tls/certificate_expiry.h"

#include <fstream>

#include <catch2/catch.hpp>

#include "tests/support/temp_dir.h"

namespace {

// CN=node-a, self-signed, notAfter 2126-11-01 02:22:32 UTC.
const char kNodeCert[] = R"(-----BEGIN CERTIFICATE-----
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

TEST_CASE("certificate expiry: notAfter and subject of a PEM file", "[tls]") {
  konn::testsupport::TempDir dir;
  std::string path = dir.path() + "/node.crt";
  std::ofstream(path) << kNodeCert;
  auto e = konn::core::tls::read_certificate_expiry(path);
  REQUIRE(e);
  CHECK(e->subject == "CN=node-a");
  // 2126-11-01T02:22:32Z, as `openssl x509 -enddate` prints it.
  CHECK(std::chrono::system_clock::to_time_t(e->not_after) == 4949173352);

  std::string error;
  std::ofstream(dir.path() + "/bad.crt") << "not a certificate";
  CHECK_FALSE(konn::core::tls::read_certificate_expiry(dir.path() + "/bad.crt", &error));
  CHECK(error.find("no PEM certificate") != std::string::npos);
  CHECK_FALSE(konn::core::tls::read_certificate_expiry(dir.path() + "/missing.crt", &error));
  CHECK(error.find("cannot open") != std::string::npos);
}
