// --cipher-suites (upstream's Go names) restricts TLS 1.2 suites, and --tls-min-version raises
// the floor, on every TLS listener that takes them upstream: the agent port and the TCP frontend
// (gRPC or HTTP CONNECT).
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

// Whether a handshake offering only `version` ("-tls1_2", "-tls1_3") completes on `port`: the
// output of s_client names the protocol it agreed on ("Protocol  : TLSv1.3", or "New, TLSv1.3"),
// "(NONE)" when it failed.
std::string handshake(uint16_t port, const std::string& version,
                      const konn::testsupport::TestCerts& certs) {
  konn::testsupport::ProcessOptions o;
  o.binary = "sh";
  o.search_path = true;
  o.args = {"-c", "sleep 1 | openssl s_client " + version + " -alpn h2,http/1.1 -cert " +
                      certs.client_crt + " -key " + certs.client_key +
                      " -connect 127.0.0.1:" + std::to_string(port) +
                      " 2>&1 | grep -o 'New, [^,]*, Cipher is [^ ]*' | head -1"};
  return konn::testsupport::run_process(o, 10s).output;
}

bool agreed(uint16_t port, const std::string& version, const std::string& want,
            const konn::testsupport::TestCerts& certs) {
  return handshake(port, version, certs).find("New, " + want + ",") != std::string::npos;
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

// --tls-min-version=VersionTLS13: a TLS 1.2 client is refused and a TLS 1.3 one served, on the
// agent port and the TCP frontend, in both modes.
TEST_CASE("tls-min-version VersionTLS13 refuses TLS 1.2 on the agent port and the TCP frontend",
          "[e2e][tls]") {
  const auto& certs = konn::testsupport::test_certs();
  for (const char* mode : {"grpc", "http-connect"}) {
    DYNAMIC_SECTION("mode " << mode) {
      konn::testsupport::TempDir dir("konn-tls13");
      konn::e2e::ServerSpec spec;
      spec.tcp_frontend = true;
      spec.extra_args = {std::string("--mode=") + mode, "--tls-min-version=VersionTLS13"};
      konn::e2e::ServerProcess server(dir, certs, spec);
      server.start();
      CHECK(server.process().count_in_log("TLS 1.3 required on the agent port and the TCP "
                                          "frontend") == 1);
      for (uint16_t port : {server.agent_port(), server.frontend_port()}) {
        INFO("port " << port);
        // Retried: a handshake can come back empty when the machine is saturated.
        CHECK(konn::testsupport::eventually(
            [&] { return agreed(port, "-tls1_3", "TLSv1.3", certs); }, 20s));
        CHECK(handshake(port, "-tls1_2", certs).find("Cipher is (NONE)") != std::string::npos);
      }
    }
  }
}

// Without the flag (and with VersionTLS10/11, which upstream accepts with a warning) TLS 1.2 is
// the floor: a TLS 1.2 client is served, a TLS 1.1 one refused.
// reliability: proxy-server | --tls-min-version=VersionTLS10 (upstream: a warning) | started;
// reliability+: TLS 1.2 clients served, TLS 1.1 refused | warn "--tls-min-version=VersionTLS10 is
// reliability+: below TLS 1.2 and insecure (RFC 8996); ... TLS 1.2 is the floor" | the agent port
// reliability+: and the frontend, at TLS 1.2
TEST_CASE("tls-min-version VersionTLS10 starts with a warning and keeps TLS 1.2 the floor",
          "[e2e][tls]") {
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir("konn-tls10");
  konn::e2e::ServerSpec spec;
  spec.tcp_frontend = true;
  spec.extra_args = {"--tls-min-version=VersionTLS10"};
  konn::e2e::ServerProcess server(dir, certs, spec);
  server.start();
  CHECK(server.process().count_in_log(
            "--tls-min-version=VersionTLS10 is below TLS 1.2 and insecure (RFC 8996); konn never "
            "negotiates below TLS 1.2, so TLS 1.2 is the floor") == 1);
  for (uint16_t port : {server.agent_port(), server.frontend_port()}) {
    INFO("port " << port);
    CHECK(konn::testsupport::eventually([&] { return agreed(port, "-tls1_2", "TLSv1.2", certs); },
                                        20s));
    // SECLEVEL=0: OpenSSL 3's client would not offer TLS 1.1 otherwise, and the check would pass
    // whatever the server did.
    CHECK(handshake(port, "-tls1_1 -cipher DEFAULT:@SECLEVEL=0", certs).find("Cipher is (NONE)") !=
          std::string::npos);
  }
}

// reliability: proxy-server | --cipher-suites=TLS_RSA_WITH_RC4_128_SHA
// reliability+: --tls-min-version=VersionTLS9 | exit 2: "TLS_RSA_WITH_RC4_128_SHA is insecure",
// reliability+: "unknown version "VersionTLS9"" | on stderr | nothing: it does not start
TEST_CASE("insecure or unknown TLS settings stop the server with a message naming them",
          "[e2e][tls]") {
  konn::testsupport::ProcessOptions o;
  o.binary = konn::testsupport::Process::bin_path("proxy-server");
  o.args = {"--uds-name=/tmp/konn-never.sock",
            "--server-port=0",
            "--cluster-cert=c",
            "--cluster-key=k",
            "--cipher-suites=TLS_RSA_WITH_RC4_128_SHA",
            "--tls-min-version=VersionTLS9"};
  auto r = konn::testsupport::run_process(o, 10s);
  CHECK(r.exit_code == 2);  // a usage error
  CHECK(r.output.find("TLS_RSA_WITH_RC4_128_SHA is insecure") != std::string::npos);
  CHECK(r.output.find("unknown version \"VersionTLS9\"") != std::string::npos);
}
