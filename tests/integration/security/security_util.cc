#include "tests/integration/security/security_util.h"

#include <poll.h>

#include <asio/read.hpp>
#include <asio/write.hpp>

#include "tests/support/process_runner.h"

namespace konn::e2e {

using namespace std::chrono_literals;

bool UnixConnectClient::open(const std::string& uds) {
  std::error_code ec;
  socket_.connect(asio::local::stream_protocol::endpoint(uds), ec);
  return !ec;
}

bool UnixConnectClient::send(const std::string& request) {
  std::error_code ec;
  asio::write(socket_, asio::buffer(request), ec);
  return !ec;
}

namespace {

// Waits until the socket is readable (or closed); false on timeout.
bool readable(asio::local::stream_protocol::socket& s, std::chrono::milliseconds timeout) {
  pollfd p{s.native_handle(), POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) > 0;
}

}  // namespace

std::string UnixConnectClient::read_head(std::chrono::milliseconds timeout) {
  std::string head;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char c = 0;
  while (head.find("\r\n\r\n") == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !readable(socket_, left)) return {};
    std::error_code ec;
    if (asio::read(socket_, asio::buffer(&c, 1), ec) != 1) return {};
    head.push_back(c);
  }
  return head;
}

std::string UnixConnectClient::read_to_end(std::chrono::milliseconds timeout) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !readable(socket_, left)) return out;
    std::error_code ec;
    size_t n = socket_.read_some(asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) return out;
  }
}

bool UnixConnectClient::closed_within(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !readable(socket_, left)) return false;
    std::error_code ec;
    socket_.read_some(asio::buffer(buf), ec);
    if (ec) return true;
  }
}

std::string connect_status(UnixConnectClient& c, const std::string& target) {
  if (!c.send("CONNECT " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")) return {};
  std::string head = c.read_head(20s);
  return head.substr(0, head.find("\r\n"));
}

std::pair<std::string, std::string> issue_client_cert(const testsupport::TestCerts& certs,
                                                      const testsupport::TempDir& dir,
                                                      const std::string& name,
                                                      const std::string& cn,
                                                      const std::string& san) {
  std::string key = dir.file(name + ".key");
  std::string csr = dir.file(name + ".csr");
  std::string crt = dir.file(name + ".crt");
  std::string ext = dir.file(name + ".ext");
  std::string script =
      "set -e\n"
      "printf 'extendedKeyUsage=clientAuth\\nsubjectAltName=" +
      san + "\\n' > '" + ext + "'\n" +
      "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out '" + key + "'\n" +
      "openssl req -new -key '" + key + "' -subj '/CN=" + cn + "' -out '" + csr + "'\n" +
      "openssl x509 -req -in '" + csr + "' -CA '" + certs.ca_crt + "' -CAkey '" + certs.ca_key +
      "' -CAcreateserial -CAserial '" + dir.file(name + ".srl") + "' -days 2 -sha256 -extfile '" +
      ext + "' -out '" + crt + "'\n";
  testsupport::ProcessOptions o;
  o.binary = "sh";
  o.search_path = true;
  o.args = {"-c", script};
  auto r = testsupport::run_process(o, 30s);
  if (r.exit_code != 0) throw std::runtime_error("issuing " + name + ": " + r.output);
  return {crt, key};
}

Handshake openssl_handshake(uint16_t port, const std::string& options,
                            const testsupport::TestCerts& certs) {
  testsupport::ProcessOptions o;
  o.binary = "sh";
  o.search_path = true;
  // stdin stays open for a second: at EOF s_client may quit before a slow handshake finished.
  o.args = {"-c", "sleep 1 | openssl s_client " + options + " -alpn h2,http/1.1 -cert " +
                      certs.client_crt + " -key " + certs.client_key + " -CAfile " + certs.ca_crt +
                      " -connect 127.0.0.1:" + std::to_string(port) + " 2>&1"};
  Handshake h;
  h.output = testsupport::run_process(o, 20s).output;
  auto at = h.output.find("Cipher is ");
  h.ok = at != std::string::npos && h.output.compare(at, 16, "Cipher is (NONE)") != 0;
  return h;
}

}  // namespace konn::e2e
