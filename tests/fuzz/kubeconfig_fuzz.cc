// kubeconfig files, as kubeproxy-http (KUBECONFIG, --kubeconfig) and the server and agent
// (--kubeconfig) load them. The input is written to a file, loaded with kubectl's rules, and must
// give a RestConfig or a KubeconfigError naming the file; exec plugins are never run here (only
// the credential source runs them). Input: [override flags][context, length-prefixed][file...].

#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

#include "core/kube/kubeconfig.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

const std::string& file_path() {
  static const std::string path = [] {
    char tmpl[] = "/tmp/konn-kubeconfig-fuzz-XXXXXX";
    const char* dir = ::mkdtemp(tmpl);
    if (dir == nullptr) std::abort();
    return std::string(dir) + "/config";
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  konn::fuzz::FuzzInput in(data, size);
  uint8_t flags = in.byte();
  std::string context = in.bytes(32);
  std::string_view file = in.rest();
  {
    std::ofstream out(file_path(), std::ios::binary | std::ios::trunc);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
  }
  konn::core::kube::KubeconfigOverrides o;
  konn::core::kube::KubeconfigEnvironment env;
  env.home = "/nonexistent";
  env.service_account_dir = "/nonexistent";
  if ((flags & 1) != 0) {
    o.kubeconfig = file_path();
  } else {
    env.kubeconfig_env = file_path() + ":/nonexistent/other";
  }
  if ((flags & 2) != 0) o.context = context;
  if ((flags & 4) != 0) o.server = "https://127.0.0.1:6443";
  if ((flags & 8) != 0) o.insecure_skip_tls_verify = true;
  try {
    auto cfg = konn::core::kube::load_rest_config(o, env);
    (void)cfg.host_port();
    (void)cfg.host_header();
  } catch (const konn::core::kube::KubeconfigError& e) {
    KONN_FUZZ_CHECK(std::string(e.what()).size() > 0);
  }
  if ((flags & 16) != 0) {
    try {
      (void)konn::core::kube::load_daemon_rest_config(file_path());
    } catch (const konn::core::kube::KubeconfigError&) {
    }
  }
  return 0;
}
