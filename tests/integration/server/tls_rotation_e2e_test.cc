// TLS rotation end to end, beyond the agent port (cert_rotation_e2e_test.cc):
//  a. the HTTP CONNECT TCP+mTLS frontend re-reads --server-cert/--server-key while a CONNECT
//     transfer runs; the transfer is untouched and the next handshake shows the new certificate;
//  b. the agent reads --ca-cert/--agent-cert/--agent-key afresh at every connection attempt, so
//     moving server and agent to a new CA only needs a server restart.
#include <filesystem>
#include <thread>

#include <catch2/catch.hpp>

#include "test-client/connect_stream.h"
#include "test-client/tunnel.h"
#include "tests/integration/tunnel/e2e_util.h"
#include "tests/integration/tunnel/tunnel_stack.h"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using konn::testclient::ByteStream;
using konn::testclient::ChannelConfig;
using konn::testclient::ConnectStream;
using konn::testclient::Tunnel;
using konn::testsupport::ProcessOptions;
using konn::testsupport::run_process;

namespace {

// What `openssl x509` says about a certificate: serial and subject, for comparisons.
std::string file_identity(const std::string& cert) {
  ProcessOptions o;
  o.binary = "openssl";
  o.search_path = true;
  o.args = {"x509", "-noout", "-serial", "-subject", "-in", cert};
  return run_process(o, 10s).output;
}

// The same for the certificate a TLS server at 127.0.0.1:port presents to a client holding
// `certs`' client certificate.
std::string presented_identity(uint16_t port, const konn::testsupport::TestCerts& certs) {
  ProcessOptions o;
  o.binary = "sh";
  o.search_path = true;
  // stdin stays open for a second: at EOF s_client may quit before a slow handshake finished.
  o.args = {"-c", "sleep 1 | openssl s_client -connect 127.0.0.1:" + std::to_string(port) +
                      " -cert " + certs.client_crt + " -key " + certs.client_key +
                      " 2>/dev/null | openssl x509 -noout -serial -subject"};
  return run_process(o, 10s).output;
}

// Replaces `to` by a copy of `from` with one atomic rename (a reader sees the old or the new file,
// never a partial one).
void replace_file(const fs::path& from, const fs::path& to) {
  fs::path tmp = to;
  tmp += ".new";
  fs::copy_file(from, tmp, fs::copy_options::overwrite_existing);
  fs::rename(tmp, to);
}

// Echoes `n` bytes through `s` and checks they come back.
bool echoes(ByteStream& s, const std::string& payload) {
  if (!s.write(payload)) return false;
  std::string got;
  while (got.size() < payload.size()) {
    std::string chunk;
    if (s.read_for(&chunk, 10s) != ByteStream::ReadStatus::Data) break;
    got += chunk;
  }
  return got == payload;
}

}  // namespace

TEST_CASE("http-connect mTLS frontend: rotating the server certificate keeps a CONNECT transfer",
          "[e2e][tls][http-connect]") {
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir("konn-hcrot");
  fs::path root(dir.path());
  konn::testsupport::issue_certs(certs, (root / "v1").string());
  konn::testsupport::issue_certs(certs, (root / "v2").string());
  fs::create_directories(root / "live");
  fs::copy_file(root / "v1/server.crt", root / "live/server.crt");
  fs::copy_file(root / "v1/server.key", root / "live/server.key");

  konn::testsupport::EchoServer echo(true);
  konn::e2e::ServerSpec spec;
  spec.tcp_frontend = true;
  // --cert-reload-interval governs how often both listeners look at their files; 1s is its floor.
  spec.extra_args = {"--mode=http-connect", "--server-cert=" + (root / "live/server.crt").string(),
                     "--server-key=" + (root / "live/server.key").string(),
                     "--cert-reload-interval=1s"};
  konn::e2e::ServerProcess server(dir, certs, spec);
  server.start();
  auto agent = konn::e2e::start_agent(dir, certs, server.agent_port(), konn::e2e::AgentSpec{});
  REQUIRE(server.wait_agent_connected("agent-1", 20s));

  auto old_id = file_identity((root / "v1/server.crt").string());
  auto new_id = file_identity((root / "v2/server.crt").string());
  REQUIRE(old_id != new_id);
  REQUIRE(presented_identity(server.frontend_port(), certs) == old_id);

  ChannelConfig frontend{"",           "127.0.0.1",      server.frontend_port(),
                         certs.ca_crt, certs.client_crt, certs.client_key};
  auto dialed = ConnectStream::dial(frontend, echo.address(), 10s);
  REQUIRE(dialed.error.empty());
  ByteStream& stream = *dialed.stream;

  // Data flows while the files change: 48 MiB in 1 MiB pieces, 50 ms apart.
  const size_t chunk = 1 << 20;
  const int chunks = 48;
  konn::e2e::Sha256 sent;
  std::atomic<bool> writes_ok{true};
  std::thread writer([&] {
    for (int i = 0; i < chunks; ++i) {
      auto data = konn::e2e::random_bytes(chunk, static_cast<uint64_t>(100 + i));
      sent.update(data);
      if (!stream.write(data)) writes_ok = false;
      std::this_thread::sleep_for(50ms);
    }
  });
  konn::e2e::Sha256 got;
  size_t received = 0;
  std::thread reader([&] {
    std::string piece;
    while (received < chunk * chunks &&
           stream.read_for(&piece, 20s) == ByteStream::ReadStatus::Data) {
      got.update(piece);
      received += piece.size();
    }
  });
  std::this_thread::sleep_for(300ms);
  replace_file(root / "v2/server.key", root / "live/server.key");
  replace_file(root / "v2/server.crt", root / "live/server.crt");
  bool rotated = konn::testsupport::eventually(
      [&] { return presented_identity(server.frontend_port(), certs) == new_id; }, 20s);
  CHECK(rotated);
  writer.join();
  reader.join();
  CHECK(writes_ok);
  CHECK(received == chunk * chunks);
  CHECK(got.hex() == sent.hex());
  CHECK_FALSE(stream.ended());  // the transfer's connection outlived the rotation
  stream.close(1s);

  // A new CONNECT after the rotation works, with the same client credentials.
  auto again = ConnectStream::dial(frontend, echo.address(), 10s);
  REQUIRE(again.error.empty());
  CHECK(echoes(*again.stream, "after the rotation"));
  CHECK(server.process().count_in_log("frontend TLS certificate files changed") >= 1);
}

TEST_CASE("agent: a new CA, certificate and key are read at the next connection attempt",
          "[e2e][tls]") {
  const auto& set1 = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir("konn-agrot");
  fs::path root(dir.path());
  auto set2 = konn::testsupport::generate_certs((root / "set2").string());
  REQUIRE(file_identity(set1.ca_crt) != file_identity(set2.ca_crt));

  // The files each daemon reads, starting with set 1.
  fs::create_directories(root / "server");
  fs::create_directories(root / "agent");
  auto install = [&](const konn::testsupport::TestCerts& c) {
    replace_file(c.server_crt, root / "server/server.crt");
    replace_file(c.server_key, root / "server/server.key");
    replace_file(c.ca_crt, root / "server/ca.crt");
  };
  auto install_agent = [&](const konn::testsupport::TestCerts& c) {
    replace_file(c.ca_crt, root / "agent/ca.crt");
    replace_file(c.agent_crt, root / "agent/agent.crt");
    replace_file(c.agent_key, root / "agent/agent.key");
  };
  install(set1);
  install_agent(set1);

  konn::testsupport::EchoServer echo(true);
  konn::e2e::ServerSpec spec;  // gRPC frontend on the unix socket; agents need a client cert
  spec.extra_args = {"--cluster-cert=" + (root / "server/server.crt").string(),
                     "--cluster-key=" + (root / "server/server.key").string(),
                     "--cluster-ca-cert=" + (root / "server/ca.crt").string()};
  konn::e2e::ServerProcess server(dir, set1, spec);
  server.start();
  konn::e2e::AgentSpec agent_spec;
  agent_spec.ca_cert = (root / "agent/ca.crt").string();
  agent_spec.agent_cert = (root / "agent/agent.crt").string();
  agent_spec.agent_key = (root / "agent/agent.key").string();
  auto agent = konn::e2e::start_agent(dir, set1, server.agent_port(), agent_spec);
  REQUIRE(server.wait_agent_connected("agent-1", 20s));

  auto before = Tunnel::dial(server.new_channel(), echo.address(), 10s);
  REQUIRE(before.tunnel);
  REQUIRE(echoes(*before.tunnel, "before the rotation"));

  // The agent's files move to set 2. Its established stream is not touched: the tunnel still
  // works until the server goes away.
  install_agent(set2);
  CHECK(echoes(*before.tunnel, "files replaced, same connection"));
  auto during = Tunnel::dial(server.new_channel(), echo.address(), 10s);
  REQUIRE(during.tunnel);
  CHECK(echoes(*during.tunnel, "a new tunnel on the old agent stream"));
  CHECK(during.tunnel->close().empty());

  // The server restarts with set 2's certificate and client CA. The agent's next attempts use
  // the new files, or it could never connect again: the new server trusts only set 2's CA.
  server.kill();
  install(set2);
  server.start();
  REQUIRE(server.wait_agent_connected("agent-1", 20s));
  auto after = Tunnel::dial(server.new_channel(), echo.address(), 10s);
  REQUIRE(after.tunnel);
  CHECK(echoes(*after.tunnel, "after the rotation"));
  CHECK(after.tunnel->close().empty());
  // The old tunnel ended with the old server.
  std::string ignored;
  while (before.tunnel->read_for(&ignored, 10s) == ByteStream::ReadStatus::Data) {
  }
  CHECK(before.tunnel->ended());

  // The control: an agent still holding set 1's files is refused by the restarted server.
  konn::e2e::AgentSpec stale;
  stale.id = "agent-stale";
  auto stale_agent = konn::e2e::start_agent(dir, set1, server.agent_port(), stale);
  CHECK(stale_agent->wait_for_log(
      "cannot connect to proxy-server 127.0.0.1:" + std::to_string(server.agent_port()), 20s));
  CHECK(server.process().count_in_log("agent connected agentID=agent-stale ") == 0);
}
