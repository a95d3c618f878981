#pragma once

#include <string>

namespace konn::testsupport {

// Paths of one set of development certificates made by scripts/gen-certs.sh.
struct TestCerts {
  std::string dir;
  std::string ca_crt, ca_key;
  std::string server_crt, server_key;  // SANs localhost, 127.0.0.1, ::1
  std::string client_crt, client_key;  // CN kube-apiserver (frontend mTLS)
  std::string agent_crt, agent_key;    // CN proxy-agent
};

// The process-wide set: generated on first use into a temp dir that lives until exit. Runs
// source_dir()/scripts/gen-certs.sh; throws std::runtime_error when that fails.
const TestCerts& test_certs();

// A fresh, independent set (its own CA) in `dir`: certificates that the process-wide CA does not
// trust, for rejection tests.
TestCerts generate_certs(const std::string& dir);

// A new set in `dir` signed by the CA of `ca`: certificates (a second server certificate, say)
// that peers trusting `ca` accept, for rotation tests.
TestCerts issue_certs(const TestCerts& ca, const std::string& dir);

}  // namespace konn::testsupport
