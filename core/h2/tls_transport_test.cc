// TlsTransport on its own: OpenSSL driven on the socket, through a socket that fills, a peer that
// vanishes and a peer that is gone while we write.
#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ssl.hpp>
#include <catch2/catch.hpp>

#include "core/h2/transport.h"
#include "tests/support/download_body.h"
#include "tests/support/test_certs.h"

using konn::core::h2::TcpTlsTransport;

namespace {

// A handshaken pair of TLS transports over loopback TCP, driven by one io_context on the test's
// thread.
struct TlsPair {
  TlsPair() {
    const auto& certs = konn::testsupport::test_certs();
    server_ctx.use_certificate_chain_file(certs.server_crt);
    server_ctx.use_private_key_file(certs.server_key, asio::ssl::context::pem);
    konn::core::h2::enable_h2_alpn(server_ctx);
    client_ctx.load_verify_file(certs.ca_crt);
    client_ctx.set_verify_mode(asio::ssl::verify_peer);

    asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    asio::ip::tcp::socket c(io);
    c.connect(acceptor.local_endpoint());
    asio::ip::tcp::socket s = acceptor.accept();
    // Small kernel buffers, so that a few hundred KiB fill the socket and a write has to wait.
    s.set_option(asio::socket_base::receive_buffer_size(16 * 1024));
    c.set_option(asio::socket_base::send_buffer_size(16 * 1024));
    server = std::make_unique<TcpTlsTransport>(std::move(s), server_ctx);
    client = std::make_unique<TcpTlsTransport>(std::move(c), client_ctx);

    int done = 0;
    std::error_code sec, cec;
    server->async_handshake(true, [&](std::error_code ec) {
      sec = ec;
      ++done;
    });
    client->async_handshake(false, [&](std::error_code ec) {
      cec = ec;
      ++done;
    });
    run_until([&] { return done == 2; });
    REQUIRE_FALSE(sec);
    REQUIRE_FALSE(cec);
    // An idle session holds no record buffer (a connection per tunnel is mostly idle).
    REQUIRE((SSL_get_mode(server->native_handle()) & SSL_MODE_RELEASE_BUFFERS) != 0);
    REQUIRE((SSL_get_mode(client->native_handle()) & SSL_MODE_RELEASE_BUFFERS) != 0);
  }

  template <typename Pred>
  void run_until(Pred done) {
    for (int i = 0; i < 100000 && !done(); ++i) {
      io.run_for(std::chrono::milliseconds(10));
      io.restart();
    }
    REQUIRE(done());
  }

  // Reads on `t` until `want` bytes arrived or a read failed.
  std::string read_all(TcpTlsTransport& t, size_t want, std::error_code& error) {
    std::string got;
    bool stop = false;
    std::function<void()> next = [&] {
      t.async_read([&](std::error_code ec, std::string_view in) {
        if (ec) {
          error = ec;
          stop = true;
          return;
        }
        got.append(in);
        if (got.size() >= want) {
          stop = true;
          return;
        }
        next();
      });
    };
    next();
    run_until([&] { return stop; });
    return got;
  }

  asio::io_context io;
  asio::ssl::context server_ctx{asio::ssl::context::tls_server};
  asio::ssl::context client_ctx{asio::ssl::context::tls_client};
  std::unique_ptr<TcpTlsTransport> server;
  std::unique_ptr<TcpTlsTransport> client;
};

// `n` bytes of the download fixture's pieces: a piece lost, repeated or moved shows.
std::string pattern(size_t n) {
  using konn::testsupport::kDownloadPiece;
  std::string s((n / kDownloadPiece + 1) * kDownloadPiece, '\0');
  for (uint64_t k = 0; k * kDownloadPiece < n; ++k) {
    konn::testsupport::download_piece(k, s.data() + k * kDownloadPiece);
  }
  s.resize(n);
  return s;
}

}  // namespace

TEST_CASE("a TLS transport writes through a socket that fills, and the reader gets every byte",
          "[h2][tls]") {
  TlsPair p;
  const std::string sent = pattern(8 * 1024 * 1024 + 17);
  bool written = false;
  std::error_code wec;
  size_t wn = 0;
  p.client->async_write(asio::buffer(sent), [&](std::error_code ec, size_t n) {
    wec = ec;
    wn = n;
    written = true;
  });
  // Nobody reads yet: the write fills the socket and waits, and is not complete.
  p.io.run_for(std::chrono::milliseconds(50));
  p.io.restart();
  CHECK_FALSE(written);
  std::error_code rec;
  const std::string got = p.read_all(*p.server, sent.size(), rec);
  p.run_until([&] { return written; });
  CHECK_FALSE(wec);
  CHECK(wn == sent.size());
  REQUIRE_FALSE(rec);
  REQUIRE(got.size() == sent.size());
  CHECK(got == sent);
}

// Issue 42: a server sends no session ticket (TLS 1.3 sends them right after the handshake, so a
// client that read the server's first bytes has read any ticket).
TEST_CASE("a TLS server transport issues no session ticket", "[h2][tls]") {
  TlsPair p;
  bool written = false;
  p.server->async_write(asio::buffer("x", 1), [&](std::error_code, size_t) { written = true; });
  std::error_code rec;
  CHECK(p.read_all(*p.client, 1, rec) == "x");
  p.run_until([&] { return written; });
  SSL_SESSION* session = SSL_get_session(p.client->native_handle());
  REQUIRE(session != nullptr);
  CHECK(SSL_SESSION_is_resumable(session) == 0);
}

TEST_CASE("a TLS read ends with stream_truncated when the peer vanishes without close_notify",
          "[h2][tls]") {
  TlsPair p;
  const std::string hello = "hello";
  bool written = false;
  p.client->async_write(asio::buffer(hello), [&](std::error_code, size_t) { written = true; });
  p.run_until([&] { return written; });
  // The client takes in the server's session tickets first: a socket closed with unread bytes
  // would end with a reset, not an end of stream.
  p.client->async_read([](std::error_code, std::string_view) {});
  p.io.run_for(std::chrono::milliseconds(50));
  p.io.restart();
  p.client->close();  // the TCP connection ends (FIN); no TLS alert was sent
  std::error_code rec;
  const std::string got = p.read_all(*p.server, 1 << 20, rec);
  CHECK(got == hello);  // what came before the end is delivered first
  CHECK(rec == asio::ssl::error::stream_truncated);
}

TEST_CASE("writing to a TLS peer that is gone is an error, never SIGPIPE", "[h2][tls]") {
  // At its default, SIGPIPE would end this test process: the transport must not raise it.
  auto previous = std::signal(SIGPIPE, SIG_DFL);
  {
    TlsPair p;
    p.client->close();
    const std::string chunk(64 * 1024, 'x');
    std::error_code wec;
    for (int i = 0; i < 64 && !wec; ++i) {
      bool written = false;
      p.server->async_write(asio::buffer(chunk), [&](std::error_code ec, size_t) {
        wec = ec;
        written = true;
      });
      p.run_until([&] { return written; });
    }
    INFO(wec.message());
    CHECK((wec == asio::error::broken_pipe || wec == asio::error::connection_reset));
  }
  std::signal(SIGPIPE, previous);
}

TEST_CASE("a TLS client refuses a server its CA does not vouch for, with the reason", "[h2][tls]") {
  asio::io_context io;
  const auto& certs = konn::testsupport::test_certs();
  asio::ssl::context server_ctx{asio::ssl::context::tls_server};
  server_ctx.use_certificate_chain_file(certs.server_crt);
  server_ctx.use_private_key_file(certs.server_key, asio::ssl::context::pem);
  konn::core::h2::enable_h2_alpn(server_ctx);
  asio::ssl::context client_ctx{asio::ssl::context::tls_client};  // trusts no CA
  client_ctx.set_verify_mode(asio::ssl::verify_peer);

  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  asio::ip::tcp::socket c(io);
  c.connect(acceptor.local_endpoint());
  TcpTlsTransport server(acceptor.accept(), server_ctx);
  TcpTlsTransport client(std::move(c), client_ctx);
  int done = 0;
  std::error_code sec, cec;
  server.async_handshake(true, [&](std::error_code ec) {
    sec = ec;
    ++done;
  });
  client.async_handshake(false, [&](std::error_code ec) {
    cec = ec;
    ++done;
  });
  for (int i = 0; i < 500 && done < 2; ++i) {
    io.run_for(std::chrono::milliseconds(10));
    io.restart();
  }
  REQUIRE(done == 2);
  CHECK(sec);
  REQUIRE(cec);
  CHECK(cec.message().find("certificate verify failed") != std::string::npos);
  CHECK(SSL_get_verify_result(client.native_handle()) != X509_V_OK);
  CHECK_FALSE(client.handshake_done());
}
