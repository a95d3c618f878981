// --cipher-suites (upstream's Go names) restricts TLS 1.2 suites on every TLS listener: the gRPC
// agent port and the HTTP CONNECT frontend.
#include <catch2/catch.hpp>

#include "tests/integration/tunnel/tunnel_stack.h"

using namespace std::chrono_literals;

namespace {

// The cipher negotiated by a TLS 1.2 handshake offering only `cipher`, or "(NONE)".
std::string negotiated(uint16_t port, const std::string& cipher,
                       const konn::testsupport::TestCerts& certs) {
  konn::testsupport::ProcessOptions o;
  o.binary = "sh";
  o.search_path = true;
  // stdin stays open for a second: at EOF s_client may quit before a slow handshake finished.
  o.args = {"-c", "sleep 1 | openssl s_client -tls1_2 -cipher " + cipher +
                      " -alpn h2,http/1.1 -cert " + certs.client_crt + " -key " +
                      certs.client_key + " -connect 127.0.0.1:" + std::to_string(port) +
                      " 2>&1 | grep -o 'Cipher is [^ ]*' | head -1"};
  return konn::testsupport::run_process(o, 10s).output;
}

}  // namespace

// reliability: proxy-server | TLS 1.2 client offering only a suite outside --cipher-suites |
// reliability+: handshake fails (`Cipher is (NONE)`) | nothing | the allowed suite is negotiated
TEST_CASE("cipher suites flag restricts TLS 1.2 suites on the agent port and the CONNECT frontend",
          "[e2e][tls]") {
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir("konn-ciphers");
  konn::e2e::ServerSpec spec;
  spec.tcp_frontend = true;
  spec.extra_args = {"--mode=http-connect",
                     "--cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"};
  konn::e2e::ServerProcess server(dir, certs, spec);
  server.start();
  for (uint16_t port : {server.agent_port(), server.frontend_port()}) {
    INFO("port " << port);
    // The allowed suite is negotiated (retried: a handshake can come back empty when the
    // machine is saturated by parallel tests); the other never is.
    CHECK(konn::testsupport::eventually(
        [&] {
          return negotiated(port, "ECDHE-ECDSA-AES128-GCM-SHA256", certs)
                     .find("Cipher is ECDHE-ECDSA-AES128-GCM-SHA256") != std::string::npos;
        },
        20s));
    CHECK(negotiated(port, "ECDHE-ECDSA-AES256-GCM-SHA384", certs).find("Cipher is (NONE)") !=
          std::string::npos);
  }
}

// reliability: proxy-server | --cipher-suites=TLS_RSA_WITH_RC4_128_SHA
// reliability+: --tls-min-version=VersionTLS11 | exit 2: "TLS_RSA_WITH_RC4_128_SHA is insecure",
// reliability+: "VersionTLS11 is refused" | on stderr | nothing: it does not start
TEST_CASE("insecure or unknown TLS settings stop the server with a message naming them",
          "[e2e][tls]") {
  konn::testsupport::ProcessOptions o;
  o.binary = konn::testsupport::Process::bin_path("proxy-server");
  o.args = {"--uds-name=/tmp/konn-never.sock", "--server-port=0", "--cluster-cert=c",
            "--cluster-key=k", "--cipher-suites=TLS_RSA_WITH_RC4_128_SHA",
            "--tls-min-version=VersionTLS11"};
  auto r = konn::testsupport::run_process(o, 10s);
  CHECK(r.exit_code == 2);  // a usage error
  CHECK(r.output.find("TLS_RSA_WITH_RC4_128_SHA is insecure") != std::string::npos);
  CHECK(r.output.find("VersionTLS11 is refused") != std::string::npos);
}
