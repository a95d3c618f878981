#include "tests/support/test_certs.h"

#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/support/process_runner.h"
#include "tests/support/temp_dir.h"

using namespace konn::testsupport;

namespace {

RunResult openssl(std::vector<std::string> args) {
  ProcessOptions o;
  o.binary = "openssl";
  o.search_path = true;
  o.args = std::move(args);
  return run_process(std::move(o), 10s);
}

}  // namespace

TEST_CASE("test certs: generated once, chain verifies, SANs and CNs", "[support]") {
  const TestCerts& c = test_certs();
  CHECK(&c == &test_certs());
  for (const auto* f : {&c.ca_crt, &c.ca_key, &c.server_crt, &c.server_key, &c.client_crt,
                        &c.client_key, &c.agent_crt, &c.agent_key}) {
    CHECK(access(f->c_str(), R_OK) == 0);
  }
  RunResult v = openssl({"verify", "-CAfile", c.ca_crt, c.server_crt, c.client_crt, c.agent_crt});
  CHECK(v.exit_code == 0);
  RunResult san = openssl({"x509", "-in", c.server_crt, "-noout", "-ext", "subjectAltName"});
  CHECK(san.output.find("DNS:localhost") != std::string::npos);
  CHECK(san.output.find("IP Address:127.0.0.1") != std::string::npos);
  RunResult cn = openssl({"x509", "-in", c.client_crt, "-noout", "-subject"});
  CHECK(cn.output.find("kube-apiserver") != std::string::npos);
  RunResult agent = openssl({"x509", "-in", c.agent_crt, "-noout", "-subject"});
  CHECK(agent.output.find("proxy-agent") != std::string::npos);
}

TEST_CASE("test certs: an independent set is not trusted by the shared CA", "[support]") {
  TempDir dir;
  TestCerts other = generate_certs(dir.path());
  RunResult v = openssl({"verify", "-CAfile", test_certs().ca_crt, other.agent_crt});
  CHECK(v.exit_code != 0);
  // Idempotent: a second run keeps the files.
  RunResult before = openssl({"x509", "-in", other.ca_crt, "-noout", "-fingerprint"});
  generate_certs(dir.path());
  RunResult after = openssl({"x509", "-in", other.ca_crt, "-noout", "-fingerprint"});
  CHECK(before.output == after.output);
}
