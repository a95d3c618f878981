// Certificate rotation: replacing the server's certificate files while a tunnel carries data
// must not disturb the tunnel, and the next TLS handshake must present the new certificate
// (upstream needs a restart: its issues #350 and #801).
#include <filesystem>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>

#include "test-client/tunnel.h"
#include "tests/integration/tunnel/e2e_util.h"
#include "tests/integration/tunnel/tunnel_stack.h"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using konn::testsupport::ProcessOptions;
using konn::testsupport::run_process;

namespace {

// The SHA-256 fingerprint of the certificate a TLS server at 127.0.0.1:port presents.
std::string presented_fingerprint(uint16_t port, const konn::testsupport::TestCerts& certs) {
  ProcessOptions o;
  o.binary = "sh";
  o.search_path = true;
  // stdin stays open for a second: at EOF s_client may quit before a slow handshake finished.
  o.args = {"-c", "sleep 1 | openssl s_client -connect 127.0.0.1:" + std::to_string(port) +
                      " -cert " + certs.agent_crt + " -key " + certs.agent_key +
                      " 2>/dev/null | openssl x509 -noout -fingerprint -sha256"};
  return run_process(o, 10s).output;
}

std::string file_fingerprint(const std::string& cert) {
  ProcessOptions o;
  o.binary = "openssl";
  o.search_path = true;
  o.args = {"x509", "-noout", "-fingerprint", "-sha256", "-in", cert};
  return run_process(o, 10s).output;
}

}  // namespace

TEST_CASE("rotating the agent-port certificate keeps tunnels and serves the new one",
          "[e2e][tls]") {
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir("konn-rotate");
  fs::path root(dir.path());
  // Kubernetes mounts Secrets through a symlinked directory swapped atomically; do the same.
  konn::testsupport::issue_certs(certs, (root / "v1").string());
  konn::testsupport::issue_certs(certs, (root / "v2").string());
  fs::create_directory_symlink(root / "v1", root / "live");

  konn::testsupport::EchoServer echo(true);
  konn::e2e::ServerSpec spec;
  spec.extra_args = {"--cluster-cert=" + (root / "live/server.crt").string(),
                     "--cluster-key=" + (root / "live/server.key").string(),
                     "--cert-reload-interval=1s"};
  konn::e2e::ServerProcess server(dir, certs, spec);
  server.start();
  auto agent = konn::e2e::start_agent(dir, certs, server.agent_port(), konn::e2e::AgentSpec{});
  REQUIRE(server.wait_agent_connected("agent-1", 20s));
  auto old_fp = file_fingerprint((root / "v1/server.crt").string());
  auto new_fp = file_fingerprint((root / "v2/server.crt").string());
  REQUIRE(old_fp != new_fp);
  CHECK(presented_fingerprint(server.agent_port(), certs) == old_fp);

  auto channel = server.new_channel();
  auto dialed = konn::testclient::Tunnel::dial(channel, echo.address(), 10s);
  REQUIRE(dialed.tunnel);
  auto& tunnel = *dialed.tunnel;
  // Keep data flowing through the rotation.
  const size_t chunk = 1 << 20;
  const int chunks = 48;
  konn::e2e::Sha256 sent;
  std::thread writer([&] {
    for (int i = 0; i < chunks; ++i) {
      auto data = konn::e2e::random_bytes(chunk, static_cast<uint64_t>(i));
      sent.update(data);
      tunnel.write(data);
      std::this_thread::sleep_for(50ms);
    }
  });
  std::this_thread::sleep_for(500ms);
  fs::create_directory_symlink(root / "v2", root / "live.new");
  fs::rename(root / "live.new", root / "live");  // atomic swap
  bool rotated = konn::testsupport::eventually(
      [&] { return presented_fingerprint(server.agent_port(), certs) == new_fp; }, 15s);
  CHECK(rotated);
  auto back = konn::e2e::read_exactly(tunnel, chunk * chunks, 20s);
  writer.join();
  konn::e2e::Sha256 got;
  got.update(back);
  CHECK(back.size() == chunk * chunks);
  CHECK(got.hex() == sent.hex());
  CHECK(tunnel.close().empty());
  // A new agent handshake (against the same CA) still works after the rotation.
  konn::e2e::AgentSpec second;
  second.id = "agent-2";
  auto agent2 = konn::e2e::start_agent(dir, certs, server.agent_port(), second);
  CHECK(server.wait_agent_connected("agent-2", 20s));
}
