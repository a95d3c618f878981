#include "core/tls/tls_context.h"

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ssl.hpp>
#include <catch2/catch.hpp>
#include <openssl/ssl.h>

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
