#include "core/tls/tls_context.h"

#include <openssl/ssl.h>

#include <catch2/catch.hpp>

#include "tests/support/test_certs.h"

TEST_CASE("make_server_context: OpenSSL releases idle record buffers only when asked") {
  const auto& certs = konn::testsupport::test_certs();
  konn::core::tls::ServerTlsConfig config{certs.server_crt, certs.server_key, certs.ca_crt, {}};
  auto kept = konn::core::tls::make_server_context(config);
  CHECK((SSL_CTX_get_mode(kept->native_handle()) & SSL_MODE_RELEASE_BUFFERS) == 0);
  config.release_idle_buffers = true;
  auto released = konn::core::tls::make_server_context(config);
  CHECK((SSL_CTX_get_mode(released->native_handle()) & SSL_MODE_RELEASE_BUFFERS) != 0);
}
