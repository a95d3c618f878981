// End-to-end tests of the socks5 binary with real clients (curl, kubectl) and raw sockets.

#include <poll.h>
#include <regex>
#include <signal.h>

#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include "harness.h"

using namespace std::chrono_literals;
using namespace konn::socks5::e2e;
using asio::ip::tcp;
using asio::ip::udp;
using Bytes = std::vector<uint8_t>;

namespace {

// Reads up to n bytes from a blocking fd, waiting at most `wait` for each chunk (poll, since
// Asio's synchronous reads ignore SO_RCVTIMEO).
Bytes recv_bounded(int fd, size_t n, int wait_ms = 5000) {
  Bytes b(n);
  size_t got = 0;
  while (got < n) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, wait_ms) <= 0) break;
    ssize_t r = ::recv(fd, b.data() + got, n - got, 0);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  b.resize(got);
  return b;
}

RunResult curl(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"curl", "-sS", "--max-time", "10", "--noproxy", ""};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, 15s);
}

// A raw SOCKS client over a blocking socket with a receive timeout.
struct RawClient {
  asio::io_context ctx;
  tcp::socket s{ctx};
  explicit RawClient(uint16_t port) {
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  void send(const Bytes& b) { asio::write(s, asio::buffer(b)); }
  // Reads exactly n bytes, or fewer on EOF/error or after 5 s without progress.
  Bytes recv(size_t n) { return recv_bounded(s.native_handle(), n); }
};

Bytes ipv4_request(uint8_t cmd, const asio::ip::address_v4& a, uint16_t port) {
  auto b = a.to_bytes();
  return {0x05,
          cmd,
          0x00,
          0x01,
          b[0],
          b[1],
          b[2],
          b[3],
          static_cast<uint8_t>(port >> 8),
          static_cast<uint8_t>(port & 0xFF)};
}

uint16_t port_of(const Bytes& reply) { return static_cast<uint16_t>(reply[8] << 8 | reply[9]); }

}  // namespace

// reliability: socks5 | CONNECT to a name that does not resolve | reply `04` (host unreachable) |
// reliability+: info "close ... reason=..." (one line per session) | socks5
TEST_CASE("curl --socks5 and --socks5-hostname without authentication", "[e2e]") {
  TempDir dir;
  HttpServer http("hello through socks\n");
  FakeDns dns(std::map<std::string, std::string>{{"api.internal.test", "127.0.0.1"}});
  Socks5Daemon socks(dir, {"--dns-servers=" + dns.address()});
  auto proxy = "127.0.0.1:" + std::to_string(socks.port());
  auto url_ip = "http://127.0.0.1:" + std::to_string(http.port()) + "/";

  auto a = curl({"--socks5", proxy, url_ip});
  CHECK(a.exit_code == 0);
  CHECK(a.out == "hello through socks\n");

  // socks5h: the name is resolved by the server (through c-ares and our DNS), never by curl.
  auto b = curl({"--socks5-hostname", proxy,
                 "http://api.internal.test:" + std::to_string(http.port()) + "/"});
  INFO(b.err);
  CHECK(b.exit_code == 0);
  CHECK(b.out == "hello through socks\n");

  // A name that does not exist: reply 04 (host unreachable); curl reports a SOCKS failure.
  auto c = curl({"--socks5-hostname", proxy, "http://nope.internal.test:80/"});
  INFO(c.err);
  CHECK(c.exit_code == 97);
  CHECK(c.err.find("connection to nope.internal.test. (4)") != std::string::npos);

  // One close line per session, with id, user, destination, bytes and duration.
  CHECK(socks.log_has("dst=api.internal.test:" + std::to_string(http.port())));
  std::regex close_line(
      R"(\[S\d+\] close client=127\.0\.0\.1:\d+ user=- cmd=CONNECT dst=127\.0\.0\.1:\d+ reply=succeeded up=\d+ down=\d+ duration=\d+ms)");
  auto log = socks.log();
  CHECK(std::regex_search(log, close_line));
  CHECK(http.requests() == 2);
}

// reliability: socks5 | wrong password | auth status failure, closed (curl exit 97) | warn
// reliability+: "authentication failed for user "alice" from ..." | socks5; the right password
// reliability+: works
// reliability: socks5 | no credentials when a users file is set | method `FF` (no acceptable
// reliability+: method), closed | info "close ... reason="no acceptable method"" | socks5
TEST_CASE("curl with user:pass against a crypt(3) users file", "[e2e]") {
  TempDir dir;
  HttpServer http("authenticated\n");
  write_file(dir.file("users"), "# test users\n" + user_line("alice", "wonder land"));
  Socks5Daemon socks(dir, {"--users-file=" + dir.file("users")});
  auto url = "http://127.0.0.1:" + std::to_string(http.port()) + "/";
  auto port = std::to_string(socks.port());

  auto ok = curl({"-x", "socks5://alice:wonder%20land@127.0.0.1:" + port, url});
  CHECK(ok.exit_code == 0);
  CHECK(ok.out == "authenticated\n");
  auto okh = curl({"-x", "socks5h://alice:wonder%20land@127.0.0.1:" + port,
                   "http://localhost:" + std::to_string(http.port()) + "/"});
  CHECK(okh.exit_code == 0);
  CHECK(okh.out == "authenticated\n");

  auto bad = curl({"-x", "socks5://alice:wrong@127.0.0.1:" + port, url});
  CHECK(bad.exit_code == 97);
  auto none = curl({"--socks5", "127.0.0.1:" + port, url});
  CHECK(none.exit_code == 97);
  CHECK(socks.log_has("authentication failed for user \"alice\""));
  CHECK(socks.log_has("user=alice cmd=CONNECT"));

  // The users file is re-read when it changes.
  write_file(dir.file("users.new"), user_line("bob", "builder"));
  std::filesystem::rename(dir.file("users.new"), dir.file("users"));
  bool bob_in = wait_until(
      [&] {
        return curl({"-x", "socks5://bob:builder@127.0.0.1:" + port, url}).exit_code == 0;
      },
      10s);
  CHECK(bob_in);
  CHECK(curl({"-x", "socks5://alice:wonder%20land@127.0.0.1:" + port, url}).exit_code == 97);
}

// reliability: socks5 | CONNECT matching a deny rule, or no rule with default deny | reply `02`,
// reliability+: closed | warn "denied connect to x.blocked.test (127.0.0.1) port ... by rule 1
// reliability+: "deny host=*.blocked.test"" or "... by policy "default deny"" | socks5; allowed
// reliability+: destinations connect
TEST_CASE("a rule denial gets 02 and a log line, the YAML config file sets the same keys",
          "[e2e]") {
  TempDir dir;
  HttpServer http("allowed\n");
  write_file(dir.file("socks5.yaml"),
             "default-policy: deny\n"
             "rule:\n"
             "  - allow host=localhost port=" +
                 std::to_string(http.port()) +
                 "\n"
                 "  - deny host=*.blocked.test\n"
                 "handshake-timeout: 3s\n");
  FakeDns dns(std::map<std::string, std::string>{{"x.blocked.test", "127.0.0.1"}});
  Socks5Daemon socks(dir,
                     {"--config=" + dir.file("socks5.yaml"), "--dns-servers=" + dns.address()});
  auto proxy = "127.0.0.1:" + std::to_string(socks.port());
  auto port = std::to_string(http.port());

  CHECK(curl({"--socks5-hostname", proxy, "http://localhost:" + port + "/"}).out == "allowed\n");
  auto denied = curl({"--socks5-hostname", proxy, "http://x.blocked.test:" + port + "/"});
  INFO(denied.err);
  CHECK(denied.exit_code == 97);
  CHECK(denied.err.find("connection to x.blocked.test. (2)") != std::string::npos);
  CHECK(socks.log_has("denied connect to x.blocked.test (127.0.0.1) port " + port));
  CHECK(socks.log_has("by rule 1 \"deny host=*.blocked.test\""));
  // Not matched by any rule: the default policy (deny) applies.
  auto by_policy = curl({"--socks5", proxy, "http://127.0.0.1:" + port + "/"});
  CHECK(by_policy.exit_code == 97);
  CHECK(socks.log_has("by policy \"default deny\""));
  CHECK(http.requests() == 1);
}

TEST_CASE("kubectl get --raw /api through socks5 (proxy-url on the kubeconfig cluster)", "[e2e]") {
  TempDir dir;
  auto cert = dir.file("tls.crt");
  auto key = dir.file("tls.key");
  auto gen = run({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                  "-nodes", "-days", "1", "-subj", "/CN=localhost", "-addext",
                  "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", key, "-out", cert},
                 20s);
  REQUIRE(gen.exit_code == 0);
  auto fixture_log = dir.file("fixture.log");
  Process fixture({"node", source_dir() + "/tests/integration/socks5/api_fixture.js", cert, key},
                  fixture_log);
  std::smatch m;
  std::regex re("listening ([0-9]+)");
  std::string text;
  REQUIRE(wait_until(
      [&] {
        text = read_file(fixture_log);
        return std::regex_search(text, m, re);
      },
      10s));
  auto api_port = m[1].str();

  Socks5Daemon socks(dir);
  auto kubeconfig = dir.file("kubeconfig");
  write_file(kubeconfig,
             "apiVersion: v1\nkind: Config\nclusters:\n- name: private\n  cluster:\n"
             "    server: https://127.0.0.1:" +
                 api_port +
                 "\n"
                 "    certificate-authority: " +
                 cert +
                 "\n"
                 "    proxy-url: socks5://127.0.0.1:" +
                 std::to_string(socks.port()) +
                 "\n"
                 "users:\n- name: op\n  user:\n    token: not-checked\n"
                 "contexts:\n- name: private\n  context:\n    cluster: private\n    user: op\n"
                 "current-context: private\n");
  auto r = run({"kubectl", "--kubeconfig", kubeconfig, "get", "--raw", "/api"}, 30s,
               {"HTTPS_PROXY=socks5://127.0.0.1:" + std::to_string(socks.port())});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("\"kind\":\"APIVersions\"") != std::string::npos);
  CHECK(socks.log_has("cmd=CONNECT dst=127.0.0.1:" + api_port + " reply=succeeded"));
}

// reliability: socks5 | UDP datagram with FRAG != 0 | dropped silently | info close line "... 1
// reliability+: datagrams dropped" | the association relays the next datagram
TEST_CASE(
    "UDP ASSOCIATE: echo through the relay, FRAG != 0 dropped, ends with the control "
    "connection",
    "[e2e]") {
  TempDir dir;
  Socks5Daemon socks(dir);
  asio::io_context ctx;
  udp::socket echo(ctx, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  std::thread echo_thread([&] {
    std::array<uint8_t, 2048> b;
    for (;;) {
      udp::endpoint from;
      std::error_code ec;
      size_t n = echo.receive_from(asio::buffer(b), from, 0, ec);
      if (ec || (n == 4 && std::memcmp(b.data(), "stop", 4) == 0)) return;
      echo.send_to(asio::buffer(b.data(), n), from, 0, ec);
    }
  });

  auto control = std::make_unique<RawClient>(socks.port());
  udp::socket client(ctx, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  control->send({0x05, 0x01, 0x00});
  REQUIRE(control->recv(2) == Bytes{0x05, 0x00});
  control->send(
      ipv4_request(0x03, asio::ip::make_address_v4("127.0.0.1"), client.local_endpoint().port()));
  auto reply = control->recv(10);
  REQUIRE(reply.size() == 10);
  REQUIRE(reply[1] == 0x00);
  udp::endpoint relay(asio::ip::make_address("127.0.0.1"), port_of(reply));

  auto dgram = [&](uint8_t frag, const std::string& payload) {
    Bytes d{0x00, 0x00, frag};
    auto r = ipv4_request(0, asio::ip::make_address_v4("127.0.0.1"), echo.local_endpoint().port());
    d.insert(d.end(), r.begin() + 3, r.end());
    d.insert(d.end(), payload.begin(), payload.end());
    return d;
  };
  // A fragment first: dropped, so the first answer is for the unfragmented datagram.
  client.send_to(asio::buffer(dgram(1, "fragment")), relay);
  client.send_to(asio::buffer(dgram(0, "ping over udp")), relay);
  std::array<uint8_t, 2048> in;
  udp::endpoint from;
  std::error_code ec;
  pollfd pf{client.native_handle(), POLLIN, 0};
  REQUIRE(::poll(&pf, 1, 5000) == 1);
  size_t n = client.receive_from(asio::buffer(in), from, 0, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(n == 10 + 13);
  CHECK(in[2] == 0x00);
  CHECK(in[3] == 0x01);
  CHECK(static_cast<uint16_t>(in[8] << 8 | in[9]) == echo.local_endpoint().port());
  CHECK(std::string(reinterpret_cast<char*>(in.data() + 10), 13) == "ping over udp");

  control.reset();  // ends the association
  CHECK(socks.log_has("cmd=UDP_ASSOCIATE"));
  CHECK(socks.log_has("1 datagrams dropped"));
  // The relay port no longer forwards.
  client.send_to(asio::buffer(dgram(0, "late")), relay);
  // Nothing comes back (an ICMP error may, which is also "not forwarded").
  pollfd late{client.native_handle(), POLLIN, 0};
  if (::poll(&late, 1, 300) == 1) {
    client.receive_from(asio::buffer(in), from, 0, ec);
    CHECK(ec);
  }
  echo.send_to(asio::buffer("stop", 4), echo.local_endpoint());
  echo_thread.join();
}

TEST_CASE("BIND: first reply names the listener, second the peer, then bytes flow both ways",
          "[e2e]") {
  TempDir dir;
  Socks5Daemon socks(dir);
  RawClient c(socks.port());
  c.send({0x05, 0x01, 0x00});
  REQUIRE(c.recv(2) == Bytes{0x05, 0x00});
  c.send(ipv4_request(0x02, asio::ip::make_address_v4("127.0.0.1"), 0));
  auto first = c.recv(10);
  REQUIRE(first.size() == 10);
  REQUIRE(first[1] == 0x00);
  // The "server" of an FTP-style exchange connects to the announced address.
  asio::io_context ctx;
  tcp::socket peer(ctx);
  peer.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_of(first)));
  auto second = c.recv(10);
  REQUIRE(second.size() == 10);
  CHECK(second[1] == 0x00);
  CHECK(port_of(second) == peer.local_endpoint().port());
  c.send({'u', 'p'});
  Bytes got(2);
  asio::read(peer, asio::buffer(got));
  CHECK(got == Bytes{'u', 'p'});
  asio::write(peer, asio::buffer("down", 4));
  CHECK(c.recv(4) == Bytes{'d', 'o', 'w', 'n'});
  peer.close();
  CHECK(c.recv(1).empty());  // the peer's EOF is passed on as a half-close
  c.s.close();
  CHECK(socks.log_has("cmd=BIND dst=127.0.0.1:0 reply=succeeded up=2 down=4"));
}

// reliability: socks5 | SIGTERM with a session open | new connections refused (listener closed),
// reliability+: exit 0 after the last session | info "shutting down: draining 1 sessions ...", "all
// reliability+: sessions closed" | the open session until it ends
TEST_CASE("SIGTERM drains: live sessions finish, new ones are refused, then exit 0", "[e2e]") {
  TempDir dir;
  HttpServer http("x");
  Socks5Daemon socks(dir, {"--graceful-shutdown-timeout=10s"});
  // An established CONNECT session to an echo-less HTTP server: keep it open.
  RawClient c(socks.port());
  c.send({0x05, 0x01, 0x00});
  REQUIRE(c.recv(2) == Bytes{0x05, 0x00});
  c.send(ipv4_request(0x01, asio::ip::make_address_v4("127.0.0.1"), http.port()));
  REQUIRE(c.recv(10)[1] == 0x00);
  socks.process().signal(SIGTERM);
  REQUIRE(socks.log_has("draining 1 sessions"));
  // Still working during the drain.
  c.send({'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1', '.', '0', '\r', '\n', '\r',
          '\n'});
  auto resp = c.recv(15);
  CHECK(std::string(resp.begin(), resp.end()) == "HTTP/1.1 200 OK");
  // New connections are refused (the listener is closed).
  asio::io_context ctx;
  tcp::socket late(ctx);
  std::error_code ec;
  late.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), socks.port()), ec);
  CHECK(ec);
  c.s.close();
  CHECK(socks.process().wait(5s) == 0);
  CHECK(socks.log_has("all sessions closed"));
}

namespace {

// Sends bytes to every connection it accepts until the connection fails (a destination that
// never stops: a download in full flow).
class Flood {
 public:
  Flood() : acceptor_(ctx_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    thread_ = std::thread([this] {
      std::vector<char> chunk(64 * 1024, 'x');
      for (;;) {
        std::error_code ec;
        tcp::socket s(ctx_);
        acceptor_.accept(s, ec);
        if (ec) return;
        while (::send(s.native_handle(), chunk.data(), chunk.size(), MSG_NOSIGNAL) > 0) {
        }
      }
    });
  }
  ~Flood() {
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }

 private:
  asio::io_context ctx_;
  tcp::acceptor acceptor_;
  std::thread thread_;
};

}  // namespace

// reliability: socks5 | a client resets its connection while a spliced download is writing to it
// reliability+: (splice(2) into that socket raises SIGPIPE) | the session closes | info "close ...
// reliability+: reason=..." | socks5 (it ignores SIGPIPE)
TEST_CASE("clients that reset mid-download do not kill socks5", "[e2e]") {
  TempDir dir;
  Flood flood;
  Socks5Daemon socks(dir);
  for (int i = 0; i < 30; ++i) {
    RawClient c(socks.port());
    c.send({0x05, 0x01, 0x00});
    REQUIRE(c.recv(2) == Bytes{0x05, 0x00});
    c.send(ipv4_request(0x01, asio::ip::make_address_v4("127.0.0.1"), flood.port()));
    REQUIRE(c.recv(10)[1] == 0x00);
    REQUIRE(c.recv(256 * 1024).size() == 256 * 1024);  // the relay is in full flow
    // Reset (RST, not FIN) while socks5 keeps writing.
    linger l{1, 0};
    ::setsockopt(c.s.native_handle(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
    c.s.close();
  }
  std::this_thread::sleep_for(200ms);
  REQUIRE(socks.process().wait(0ms) == -1);  // still running
  HttpServer http("still here\n");
  RawClient after(socks.port());
  after.send({0x05, 0x01, 0x00});
  REQUIRE(after.recv(2) == Bytes{0x05, 0x00});
  after.send(ipv4_request(0x01, asio::ip::make_address_v4("127.0.0.1"), http.port()));
  CHECK(after.recv(10)[1] == 0x00);
}

// reliability: socks5 | a flood of connections over --max-sessions | each closed without a byte
// reliability+: and counted (`konn_socks5_sessions_refused_total`) | warn "refused ...: max-sessions
// reliability+: 1 reached", one line a second at most, with "(N more refusals since the last line)" |
// reliability+: the open session
TEST_CASE("max-sessions limit: the extra connection is closed and logged, the first keeps working",
          "[e2e]") {
  TempDir dir;
  HttpServer http("still here\n");
  Socks5Daemon socks(dir, {"--max-sessions=1"});
  RawClient first(socks.port());
  first.send({0x05, 0x01, 0x00});
  REQUIRE(first.recv(2) == Bytes{0x05, 0x00});
  first.send(ipv4_request(0x01, asio::ip::make_address_v4("127.0.0.1"), http.port()));
  REQUIRE(first.recv(10)[1] == 0x00);

  RawClient second(socks.port());
  second.send({0x05, 0x01, 0x00});
  CHECK(recv_bounded(second.s.native_handle(), 2).empty());  // closed without an answer
  CHECK(socks.log_has("refused 127.0.0.1: max-sessions 1 reached"));
  CHECK(socks.metric(R"(konn_socks5_sessions_refused_total{limit="max_sessions"})") == 1);

  // A flood at the limit: every refusal is counted, but the log gets about a line a second.
  constexpr int kFlood = 200;
  for (int i = 0; i < kFlood; ++i) {
    RawClient extra(socks.port());
    CHECK(recv_bounded(extra.s.native_handle(), 1).empty());
  }
  const std::string refused = R"(konn_socks5_sessions_refused_total{limit="max_sessions"})";
  for (int i = 0; i < 100 && socks.metric(refused) < 1 + kFlood; ++i) {
    std::this_thread::sleep_for(100ms);
  }
  CHECK(socks.metric(refused) == 1 + kFlood);
  std::string log = socks.log();
  size_t lines = 0;
  for (size_t at = log.find("max-sessions 1 reached"); at != std::string::npos;
       at = log.find("max-sessions 1 reached", at + 1)) {
    ++lines;
  }
  INFO(log);
  CHECK(lines >= 1);
  CHECK(lines <= 20);

  std::string get = "GET / HTTP/1.0\r\n\r\n";
  first.send(Bytes(get.begin(), get.end()));
  auto resp = first.recv(15);
  CHECK(std::string(resp.begin(), resp.end()) == "HTTP/1.1 200 OK");
}

TEST_CASE("curl to http://[::1]:port/ through socks5 (CONNECT with ATYP 04)", "[e2e][ipv6]") {
  std::unique_ptr<HttpServer> http;
  try {
    http = std::make_unique<HttpServer>("over ipv6\n", "::1");
  } catch (const std::system_error& e) {
    WARN("no ::1 on this machine (" << e.what() << "): IPv6 CONNECT not tested");
    return;
  }
  TempDir dir;
  Socks5Daemon socks(dir);
  // --socks5 (not -hostname): curl sends the IPv6 literal itself, ATYP 04.
  auto r = curl({"--socks5", "127.0.0.1:" + std::to_string(socks.port()),
                 "http://[::1]:" + std::to_string(http->port()) + "/"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "over ipv6\n");
  CHECK(
      socks.log_has("cmd=CONNECT dst=[::1]:" + std::to_string(http->port()) + " reply=succeeded"));
}

TEST_CASE("UDP rule denials: the first is logged, the rest counted at close and in a metric",
          "[e2e]") {
  TempDir dir;
  asio::io_context ctx;
  udp::socket echo(ctx, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  udp::socket blocked(ctx, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  auto blocked_port = blocked.local_endpoint().port();
  Socks5Daemon socks(dir, {"--rule=deny cmd=udp port=" + std::to_string(blocked_port)});

  RawClient control(socks.port());
  udp::socket client(ctx, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  control.send({0x05, 0x01, 0x00});
  REQUIRE(control.recv(2) == Bytes{0x05, 0x00});
  control.send(
      ipv4_request(0x03, asio::ip::make_address_v4("127.0.0.1"), client.local_endpoint().port()));
  auto reply = control.recv(10);
  REQUIRE(reply.size() == 10);
  REQUIRE(reply[1] == 0x00);
  udp::endpoint relay(asio::ip::make_address("127.0.0.1"), port_of(reply));
  auto dgram = [&](uint16_t port, const std::string& payload) {
    Bytes d{0x00, 0x00, 0x00};
    auto r = ipv4_request(0, asio::ip::make_address_v4("127.0.0.1"), port);
    d.insert(d.end(), r.begin() + 3, r.end());
    d.insert(d.end(), payload.begin(), payload.end());
    return d;
  };
  constexpr int kDenied = 20;
  for (int i = 0; i < kDenied; ++i) client.send_to(asio::buffer(dgram(blocked_port, "no")), relay);
  // Datagrams are handled in order: once this one arrived, every denied one was handled.
  client.send_to(asio::buffer(dgram(echo.local_endpoint().port(), "yes")), relay);
  pollfd pf{echo.native_handle(), POLLIN, 0};
  REQUIRE(::poll(&pf, 1, 5000) == 1);
  std::array<uint8_t, 64> in;
  udp::endpoint from;
  CHECK(echo.receive_from(asio::buffer(in), from) == 3);
  pollfd none{blocked.native_handle(), POLLIN, 0};
  CHECK(::poll(&none, 1, 0) == 0);  // nothing reached the denied destination

  CHECK(socks.metric(R"(konn_socks5_udp_dropped_total{reason="denied"})") == kDenied);
  std::string log = socks.log();
  std::string denial = "denied udp to 127.0.0.1 port " + std::to_string(blocked_port);
  auto first = log.find(denial);
  CHECK(first != std::string::npos);
  CHECK(log.find(denial, first + 1) == std::string::npos);  // logged once, not per datagram

  control.s.close();
  CHECK(socks.log_has(std::to_string(kDenied) + " datagrams dropped (" + std::to_string(kDenied) +
                      " denied by rules, the first one logged)"));
}
