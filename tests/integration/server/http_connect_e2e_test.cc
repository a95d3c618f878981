// --mode=http-connect end to end: what kube-apiserver's HTTPConnect egress sees, byte for byte.
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <catch2/catch.hpp>

#include "core/tls/tls_context.h"
#include "tests/integration/tunnel/e2e_util.h"
#include "tests/integration/tunnel/tunnel_stack.h"

using namespace std::chrono_literals;
using konn::e2e::AgentSpec;
using konn::e2e::ServerProcess;
using konn::e2e::ServerSpec;
using konn::testsupport::Process;
using konn::testsupport::ProcessOptions;
using konn::testsupport::run_process;
using konn::testsupport::TempDir;

namespace {

using unix_socket = asio::local::stream_protocol::socket;

// A proxy-server in http-connect mode on a unix socket, with one agent unless `with_agent` is off;
// `half_close` passes a client's EOF on as a half-close (--http-connect-half-close).
struct ConnectStack {
  explicit ConnectStack(bool with_agent = true, bool tcp = false, bool half_close = false)
      : certs(konn::testsupport::test_certs()),
        server(dir, certs, ServerSpec{tcp, true, args(half_close)}) {
    server.start();
    if (with_agent) {
      agent = konn::e2e::start_agent(dir, certs, server.agent_port(), AgentSpec{});
      REQUIRE(server.wait_agent_connected("agent-1", 20s));
    }
  }
  static std::vector<std::string> args(bool half_close) {
    std::vector<std::string> a{"--mode=http-connect", "--http-connect-header-timeout=1s"};
    if (half_close) a.push_back("--http-connect-half-close");
    return a;
  }
  unix_socket connect() {
    unix_socket s(io);
    s.connect(asio::local::stream_protocol::endpoint(server.uds_path()));
    return s;
  }
  TempDir dir{"konn-hc"};
  const konn::testsupport::TestCerts& certs;
  konn::testsupport::HttpServer http;
  konn::testsupport::EchoServer echo{true};
  ServerProcess server;
  std::unique_ptr<Process> agent;
  asio::io_context io;
};

// Everything the server sends until it closes, or what came within `timeout`. Waits with poll():
// once Asio has made the descriptor non-blocking (expect_established does), SO_RCVTIMEO no longer
// bounds a blocking read_some, and a lost EOF would hang the test instead of failing it.
std::string read_all(unix_socket& s, std::chrono::milliseconds timeout = 10s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string out;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd pfd{s.native_handle(), POLLIN, 0};
    if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) {
      FAIL_CHECK("no EOF within " << timeout.count() << " ms; got " << out.size() << " bytes");
      break;
    }
    ssize_t n = ::recv(s.native_handle(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      break;
    }
  }
  return out;
}

// Reads exactly the 200 line kube-apiserver expects and, when the destination does not speak
// first, checks nothing else came with it.
void expect_established(unix_socket& s, bool destination_speaks_first = false) {
  const std::string want = "HTTP/1.1 200 Connection Established\r\n\r\n";
  std::string got(want.size(), '\0');
  asio::read(s, asio::buffer(got));
  REQUIRE(got == want);
  if (destination_speaks_first) return;
  s.non_blocking(true);
  char extra;
  std::error_code ec;
  s.read_some(asio::buffer(&extra, 1), ec);
  CHECK(ec == asio::error::would_block);  // no byte after the response before the client's own
  s.non_blocking(false);
}

std::string connect_request(const std::string& target) {
  // kube-apiserver sends Host: 127.0.0.1 whatever the target; it must be ignored.
  return "CONNECT " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
}

}  // namespace

TEST_CASE("http-connect over a unix socket: exact 200, then the tunnel carries HTTP", "[e2e][http-connect]") {
  ConnectStack st;
  st.http.add_page("/page", "through the CONNECT tunnel");
  auto s = st.connect();
  asio::write(s, asio::buffer(connect_request(st.http.address())));
  expect_established(s);
  asio::write(s, asio::buffer(std::string("GET /page HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")));
  auto rsp = read_all(s);
  CHECK(rsp.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(rsp.find("through the CONNECT tunnel") != std::string::npos);
}

TEST_CASE("http-connect moves 64 MiB each way intact", "[e2e][http-connect]") {
  ConnectStack st;
  auto s = st.connect();
  asio::write(s, asio::buffer(connect_request(st.echo.address())));
  expect_established(s);
  const size_t n = 64u << 20;
  auto data = konn::e2e::random_bytes(n, 42);
  konn::e2e::Sha256 sent;
  sent.update(data);
  std::thread writer([&] { asio::write(s, asio::buffer(data)); });
  std::string back(n, '\0');
  asio::read(s, asio::buffer(back));
  writer.join();
  konn::e2e::Sha256 got;
  got.update(back);
  CHECK(got.hex() == sent.hex());
}

TEST_CASE("http-connect passes the client's half-close when asked: the echo's tail still "
          "arrives",
          "[e2e][http-connect][half-close]") {
  ConnectStack st(true, false, /*half_close=*/true);
  auto s = st.connect();
  asio::write(s, asio::buffer(connect_request(st.echo.address())));
  expect_established(s);
  // Far more than is in flight when the EOF arrives: an agent that closed the whole connection on
  // the client's EOF (what upstream does) would cut the echo short.
  const size_t n = 8u << 20;
  auto data = konn::e2e::random_bytes(n, 7);
  konn::e2e::Sha256 hasher;
  hasher.update(data);
  const std::string sent = hasher.hex();
  std::thread writer([&] {
    asio::write(s, asio::buffer(data));
    s.shutdown(asio::socket_base::shutdown_send);
  });
  std::string back = read_all(s, 30s);  // until the tunnel's EOF
  writer.join();
  REQUIRE(back.size() == n);
  konn::e2e::Sha256 got;
  got.update(back);
  CHECK(got.hex() == sent);
  // The echo server saw the EOF (the agent shut down its write side) after every byte.
  auto digests = st.echo.digests();
  REQUIRE(digests.size() == 1);
  CHECK(digests.front() == sent);
}

TEST_CASE("http-connect passes the destination's half-close when asked: the client can still "
          "send",
          "[e2e][http-connect][half-close]") {
  ConnectStack st(true, false, /*half_close=*/true);
  // A destination that greets, shuts down its write side, then counts what it still receives.
  asio::io_context origin_io;
  asio::ip::tcp::acceptor acceptor(origin_io, {asio::ip::make_address("127.0.0.1"), 0});
  std::atomic<size_t> counted{0};
  std::atomic<bool> saw_eof{false};
  std::thread origin([&] {
    asio::ip::tcp::socket peer(origin_io);
    acceptor.accept(peer);
    asio::write(peer, asio::buffer(std::string("greeting then EOF\n")));
    peer.shutdown(asio::socket_base::shutdown_send);
    char buf[65536];
    for (;;) {
      std::error_code ec;
      size_t got = peer.read_some(asio::buffer(buf), ec);
      counted += got;
      if (ec) {
        saw_eof = ec == asio::error::eof;
        break;
      }
    }
  });
  auto s = st.connect();
  asio::write(s, asio::buffer(connect_request(
                     "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port()))));
  expect_established(s, /*destination_speaks_first=*/true);
  // The greeting, then EOF on our read side while our write side stays open.
  std::string greeting = read_all(s, 10s);
  CHECK(greeting == "greeting then EOF\n");
  const size_t n = 4u << 20;
  auto data = konn::e2e::random_bytes(n, 9);
  asio::write(s, asio::buffer(data));
  s.shutdown(asio::socket_base::shutdown_send);
  origin.join();
  CHECK(counted.load() == n);
  CHECK(saw_eof.load());
}

// reliability: proxy-server | GET instead of CONNECT, or a CONNECT target without a port |
// reliability+: `HTTP/1.1 405` or `HTTP/1.1 400`, closed | nothing | a later CONNECT is established
// reliability: proxy-server | 100 kB CONNECT header, or binary garbage | `HTTP/1.1 431` or
// reliability+: `HTTP/1.1 400`, closed | info "http-connect client ...: bad request: ..." | a later
// reliability+: CONNECT is established
TEST_CASE("http-connect failures get upstream's status, a clear body, and a close", "[e2e][http-connect]") {
  ConnectStack st;
  // reliability: proxy-server | CONNECT to a closed port | `HTTP/1.1 502 Bad Gateway` with
  // reliability+: "connect: connection refused", closed | info "dial to ... failed: ..." | a later
  // reliability+: CONNECT is established
  SECTION("dial refused: 502 with the agent's error") {
    uint16_t closed_port = 0;
    {
      asio::ip::tcp::acceptor a(st.io, {asio::ip::make_address("127.0.0.1"), 0});
      closed_port = a.local_endpoint().port();
    }
    auto s = st.connect();
    asio::write(s, asio::buffer(connect_request("127.0.0.1:" + std::to_string(closed_port))));
    auto rsp = read_all(s);
    CHECK(rsp.rfind("HTTP/1.1 502 Bad Gateway\r\n", 0) == 0);
    CHECK(rsp.find("connect: connection refused") != std::string::npos);
  }
  SECTION("not CONNECT: 405") {
    auto s = st.connect();
    asio::write(s, asio::buffer(std::string("GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n")));
    auto rsp = read_all(s);
    CHECK(rsp.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0) == 0);
    CHECK(rsp.find("this proxy only supports CONNECT passthrough") != std::string::npos);
  }
  SECTION("a target without a port: 400") {
    auto s = st.connect();
    asio::write(s, asio::buffer(connect_request("10.0.0.1")));
    auto rsp = read_all(s);
    CHECK(rsp.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
  }
  SECTION("an over-long header block: 431") {
    auto s = st.connect();
    std::string req = "CONNECT 127.0.0.1:1 HTTP/1.1\r\nX-Big: " + std::string(100000, 'a') + "\r\n\r\n";
    std::error_code ec;
    asio::write(s, asio::buffer(req), ec);  // the server may close before reading it all
    auto rsp = read_all(s);
    CHECK(rsp.rfind("HTTP/1.1 431 ", 0) == 0);
  }
  SECTION("garbage: 400") {
    auto s = st.connect();
    asio::write(s, asio::buffer(std::string("\x16\x03\x01\x02\x00garbage\r\n\r\n")));
    auto rsp = read_all(s);
    CHECK(rsp.rfind("HTTP/1.1 400 ", 0) == 0);
  }
  // reliability: proxy-server | CONNECT head that never completes | closed without an answer after
  // reliability+: the header timeout (1-5 s) | info "http-connect client ...: no complete request
  // reliability+: head in ...; closing" | a later CONNECT is established
  SECTION("slowloris: a head that never completes is dropped after the header timeout") {
    auto s = st.connect();
    asio::write(s, asio::buffer(std::string("CONNECT 127.0.0.1:80 HTTP/1.1\r\nX-Slow: ")));
    auto t0 = std::chrono::steady_clock::now();
    auto rsp = read_all(s, 10s);
    auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(rsp.empty());
    CHECK(waited >= 900ms);
    CHECK(waited < 5s);
  }
  // The daemon keeps serving after all of that.
  st.http.add_page("/still", "alive");
  auto s = st.connect();
  asio::write(s, asio::buffer(connect_request(st.http.address())));
  expect_established(s);
}

// reliability: proxy-server | CONNECT with no agent connected | `HTTP/1.1 500` "currently no
// reliability+: tunnels available: No agent available" | nothing (dial_failure_count{no_agent}) |
// reliability+: server
TEST_CASE("http-connect with no agent: 500 'No agent available'", "[e2e][http-connect]") {
  ConnectStack st(false);
  auto s = st.connect();
  asio::write(s, asio::buffer(connect_request("127.0.0.1:80")));
  auto rsp = read_all(s);
  CHECK(rsp.rfind("HTTP/1.1 500 Internal Server Error\r\n", 0) == 0);
  CHECK(rsp.find("currently no tunnels available: No agent available") != std::string::npos);
}

// reliability: proxy-server | CONNECT client that never reads while its destination floods | its
// reliability+: tunnel stalls alone | nothing | another tunnel on the same agent stream moves 32
// reliability+: MiB
TEST_CASE("http-connect: a stalled client does not slow another tunnel", "[e2e][http-connect]") {
  ConnectStack st;
  // Tunnel A: the destination floods it, the client never reads.
  asio::ip::tcp::acceptor flood_acceptor(st.io, {asio::ip::make_address("127.0.0.1"), 0});
  std::thread flooder([&] {
    auto peer = flood_acceptor.accept();
    std::string chunk(1 << 20, 'f');
    std::error_code ec;
    for (int i = 0; i < 256 && !ec; ++i) asio::write(peer, asio::buffer(chunk), ec);
  });
  auto a = st.connect();
  asio::write(a, asio::buffer(connect_request(
                     "127.0.0.1:" + std::to_string(flood_acceptor.local_endpoint().port()))));
  expect_established(a, /*destination_speaks_first=*/true);
  std::this_thread::sleep_for(300ms);  // let A's queues fill
  // Tunnel B on the same agent stream moves 32 MiB promptly.
  auto b = st.connect();
  asio::write(b, asio::buffer(connect_request(st.echo.address())));
  expect_established(b);
  const size_t n = 32u << 20;
  auto data = konn::e2e::random_bytes(n, 7);
  auto t0 = std::chrono::steady_clock::now();
  std::thread writer([&] { asio::write(b, asio::buffer(data)); });
  std::string back(n, '\0');
  asio::read(b, asio::buffer(back));
  writer.join();
  CHECK(back == data);
  CHECK(std::chrono::steady_clock::now() - t0 < 20s);
  a.close();
  flooder.join();
}

// reliability: proxy-server | curl without a client certificate on the TCP+mTLS CONNECT frontend |
// reliability+: TLS handshake refused (curl fails) | info "http-connect client ...: TLS handshake
// reliability+: failed: ..." | server
TEST_CASE("curl -p through the TCP+mTLS frontend reaches an HTTPS origin", "[e2e][http-connect]") {
  ConnectStack st(true, true);
  // A small HTTPS origin with the test server certificate (SAN 127.0.0.1).
  asio::io_context origin_io;
  konn::core::tls::ServerTlsConfig cfg;
  cfg.cert_file = st.certs.server_crt;
  cfg.key_file = st.certs.server_key;
  auto ctx = konn::core::tls::make_server_context(cfg);
  asio::ip::tcp::acceptor acceptor(origin_io, {asio::ip::make_address("127.0.0.1"), 0});
  auto origin_port = acceptor.local_endpoint().port();
  std::thread origin([&] {
    asio::ssl::stream<asio::ip::tcp::socket> s(acceptor.accept(), *ctx);
    std::error_code ec;
    s.handshake(asio::ssl::stream_base::server, ec);
    if (ec) return;
    asio::streambuf head;
    asio::read_until(s, head, "\r\n\r\n", ec);
    std::string body = "secret apiserver page";
    std::string rsp = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\nConnection: close\r\n\r\n" + body;
    asio::write(s, asio::buffer(rsp), ec);
    s.shutdown(ec);
  });
  auto proxy = "https://127.0.0.1:" + std::to_string(st.server.frontend_port());
  ProcessOptions o;
  o.binary = "curl";
  o.search_path = true;
  o.args = {"-sS", "-p", "-x", proxy, "--proxy-cacert", st.certs.ca_crt, "--proxy-cert",
            st.certs.client_crt, "--proxy-key", st.certs.client_key, "--cacert", st.certs.ca_crt,
            "https://127.0.0.1:" + std::to_string(origin_port) + "/"};
  auto r = run_process(o, 20s);
  origin.join();
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("secret apiserver page") != std::string::npos);

  // Without a client certificate the frontend refuses the TLS handshake.
  ProcessOptions no_cert = o;
  no_cert.args = {"-sS", "-p", "-x", proxy, "--proxy-cacert", st.certs.ca_crt,
                  "http://127.0.0.1:1/"};
  auto refused = run_process(no_cert, 20s);
  CHECK(refused.exit_code != 0);
}
