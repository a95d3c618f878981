#include "tests/support/test_certs.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "tests/support/process_runner.h"
#include "tests/support/temp_dir.h"

namespace konn::testsupport {

TestCerts generate_certs(const std::string& dir) {
  ProcessOptions o;
  o.binary = "bash";
  o.search_path = true;
  o.args = {source_dir() + "/scripts/gen-certs.sh", dir};
  RunResult r = run_process(std::move(o), 30s);
  if (r.exit_code != 0) {
    throw std::runtime_error("gen-certs.sh " + dir + " failed (" + std::to_string(r.exit_code) +
                             "): " + r.output);
  }
  TestCerts c;
  c.dir = dir;
  c.ca_crt = dir + "/ca.crt";
  c.ca_key = dir + "/ca.key";
  c.server_crt = dir + "/server.crt";
  c.server_key = dir + "/server.key";
  c.client_crt = dir + "/client.crt";
  c.client_key = dir + "/client.key";
  c.agent_crt = dir + "/agent.crt";
  c.agent_key = dir + "/agent.key";
  return c;
}

const TestCerts& test_certs() {
  static std::once_flag once;
  static std::unique_ptr<TempDir> dir;
  static TestCerts certs;
  std::call_once(once, [] {
    dir = std::make_unique<TempDir>("konn-certs");
    certs = generate_certs(dir->path());
  });
  return certs;
}

TestCerts issue_certs(const TestCerts& ca, const std::string& dir) {
  std::filesystem::create_directories(dir);
  // gen-certs.sh signs with the CA it finds in `dir`.
  std::filesystem::copy_file(ca.ca_crt, dir + "/ca.crt");
  std::filesystem::copy_file(ca.ca_key, dir + "/ca.key");
  return generate_certs(dir);
}

}  // namespace konn::testsupport
