#include "core/tls/tls_context.h"

#include <cstdlib>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ssl.hpp>
#include <catch2/catch.hpp>
#include <openssl/ssl.h>

#include "core/tls/pem.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

// An idle connection holds no record buffer: the frontends with a connection per tunnel
// (kube-apiserver's) rely on it. Asio's TLS stream asks for it on every session it makes, as
// core/h2's TlsEngine does (core/h2/tls_transport_test.cc), so the context needs no setting.
TEST_CASE("make_server_context: an Asio TLS stream on it releases idle record buffers") {
  const auto& certs = konn::testsupport::test_certs();
  konn::core::tls::ServerTlsConfig config{certs.server_crt, certs.server_key, certs.ca_crt, {}};
  auto ctx = konn::core::tls::make_server_context(config);
  asio::io_context io;
  asio::ssl::stream<asio::ip::tcp::socket> stream(io, *ctx);
  CHECK((SSL_get_mode(stream.native_handle()) & SSL_MODE_RELEASE_BUFFERS) != 0);
}

namespace {

// The subject common names of the certificates a context sends after its own.
std::vector<std::string> chain_names(asio::ssl::context& ctx) {
  STACK_OF(X509)* chain = nullptr;
  REQUIRE(SSL_CTX_get0_chain_certs(ctx.native_handle(), &chain) == 1);
  REQUIRE(chain != nullptr);  // set: OpenSSL does not build one on each handshake
  std::vector<std::string> out;
  for (int i = 0; i < sk_X509_num(chain); ++i) {
    char cn[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(sk_X509_value(chain, i)), NID_commonName, cn,
                              sizeof(cn));
    out.emplace_back(cn);
  }
  return out;
}

// root -> intermediate -> leaf, with openssl(1): `bundle.crt` holds the intermediate and the
// root, `leaf-chain.crt` the leaf and the intermediate.
void make_intermediate_chain(const std::string& dir) {
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
  const std::string ca_ext =
      "printf 'basicConstraints=critical,CA:TRUE\\nkeyUsage=critical,keyCertSign\\n'";
  const std::string script =
      "set -e; cd '" + dir + "'; " +
      "openssl req -x509 " + ec + " -keyout root.key -out root.crt -subj /CN=test-root -days 2"
      " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign; " +
      "openssl req " + ec + " -keyout int.key -out int.csr -subj /CN=test-intermediate; " +
      ca_ext + " > ca.ext; " +
      "openssl x509 -req -in int.csr -CA root.crt -CAkey root.key -CAcreateserial -out int.crt"
      " -days 2 -extfile ca.ext; " +
      "openssl req " + ec + " -keyout leaf.key -out leaf.csr -subj /CN=test-leaf; " +
      "openssl x509 -req -in leaf.csr -CA int.crt -CAkey int.key -CAcreateserial -out leaf.crt"
      " -days 2; " +
      "cat int.crt root.crt > bundle.crt; cat leaf.crt int.crt > leaf-chain.crt";
  REQUIRE(std::system(("bash -c \"" + script + "\" >/dev/null 2>&1").c_str()) == 0);
}

}  // namespace

// OpenSSL builds a certificate file's missing chain from the trust store on every handshake, the
// root included (issue 42: a twentieth of a server's CPU in a reconnect storm, and the peer
// decoding a certificate it already trusts). The contexts settle it once, without the root.
TEST_CASE(
    "tls contexts: the chain sent after the certificate is settled once and leaves out the root") {
  using namespace konn::core::tls;
  const auto& certs = konn::testsupport::test_certs();
  SECTION("a certificate issued by the root: nothing is sent after it") {
    auto server = make_server_context({certs.server_crt, certs.server_key, certs.ca_crt, {}});
    CHECK(chain_names(*server).empty());
    ClientTlsConfig c;
    c.ca_pem = konn::core::tls::read_pem(certs.ca_crt);
    c.cert_pem = konn::core::tls::read_pem(certs.agent_crt);
    c.key_pem = konn::core::tls::read_pem(certs.agent_key);
    auto client = make_client_context(c);
    CHECK(chain_names(*client).empty());
  }
  konn::testsupport::TempDir dir("konn-chain");
  make_intermediate_chain(dir.path());
  SECTION("an intermediate from the trust store is sent, its root is not") {
    auto server = make_server_context(
        {dir.file("leaf.crt"), dir.file("leaf.key"), dir.file("bundle.crt"), {}});
    CHECK(chain_names(*server) == std::vector<std::string>{"test-intermediate"});
    ClientTlsConfig c;
    c.ca_pem = konn::core::tls::read_pem(dir.file("bundle.crt"));
    c.cert_pem = konn::core::tls::read_pem(dir.file("leaf.crt"));
    c.key_pem = konn::core::tls::read_pem(dir.file("leaf.key"));
    CHECK(chain_names(*make_client_context(c)) == std::vector<std::string>{"test-intermediate"});
  }
  SECTION("a file with its own chain is sent as it is") {
    auto server = make_server_context(
        {dir.file("leaf-chain.crt"), dir.file("leaf.key"), certs.ca_crt, {}});
    CHECK(chain_names(*server) == std::vector<std::string>{"test-intermediate"});
  }
  SECTION("a chain that reaches no trusted root goes as far as the store does") {
    // The store holds the intermediate only, not its root: OpenSSL sent the intermediate.
    auto server =
        make_server_context({dir.file("leaf.crt"), dir.file("leaf.key"), dir.file("int.crt"), {}});
    CHECK(chain_names(*server) == std::vector<std::string>{"test-intermediate"});
  }
}
