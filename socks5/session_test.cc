#include "socks5/session.h"

#include <arpa/inet.h>
#include <array>
#include <atomic>
#include <cerrno>
#include <crypt.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <netinet/in.h>
#include <poll.h>
#include <sstream>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include "core/konnectivity/dial_error.h"
#include "core/net/listener.h"
#include "socks5/session_internal.h"
#include "socks5/socks5_app.h"
#include "socks5/splice_relay.h"

using namespace std::chrono_literals;
using asio::ip::tcp;
using Octets = std::vector<uint8_t>;

namespace {

// The daemon in-process on 127.0.0.1:0, run on its own thread.
class TestServer {
 public:
  explicit TestServer(konn::socks5::Socks5Options o) : options_(std::move(o)) {
    options_.bind_address = "127.0.0.1";
    options_.port = 0;
    options_.workers = 2;
    auto errors = options_.validate();
    REQUIRE(errors.empty());
    app_ = std::make_unique<konn::socks5::Socks5App>(options_);
    thread_ = std::thread([this] { app_->run(); });
  }
  ~TestServer() {
    app_->stop();
    thread_.join();
  }
  tcp::endpoint endpoint() const { return app_->local_endpoint(); }
  konn::socks5::Socks5App& app() { return *app_; }

 private:
  konn::socks5::Socks5Options options_;
  std::unique_ptr<konn::socks5::Socks5App> app_;
  std::thread thread_;
};

// An echo server on `host` port 0 that remembers its first client's address. Each client gets a
// thread; the destructor shuts every client socket down and joins its thread before the sockets'
// io_context goes away.
class EchoServer {
 public:
  explicit EchoServer(const std::string& host = "127.0.0.1")
      : acceptor_(konn::core::net::listen_tcp(ctx_, host, 0)) {
    thread_ = std::thread([this] {
      for (bool first = true;; first = false) {
        std::error_code ec;
        auto s = std::make_shared<tcp::socket>(ctx_);
        acceptor_.accept(*s, ec);
        if (ec) return;
        if (first) peers.set_value(s->remote_endpoint());
        clients_.push_back(s);
        echoes_.emplace_back([s] {
          std::array<char, 4096> b;
          std::error_code e;
          for (;;) {
            size_t n = s->read_some(asio::buffer(b), e);
            if (e) break;
            asio::write(*s, asio::buffer(b.data(), n), e);
          }
          s->shutdown(tcp::socket::shutdown_send, e);
        });
      }
    });
  }
  ~EchoServer() {
    std::error_code ec;
    acceptor_.cancel(ec);
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    thread_.join();
    for (auto& s : clients_) ::shutdown(s->native_handle(), SHUT_RDWR);
    for (auto& t : echoes_) t.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  std::promise<tcp::endpoint> peers;  // first client only

 private:
  asio::io_context ctx_;
  tcp::acceptor acceptor_;
  // Written by the accept thread only, read by the destructor after joining it.
  std::vector<std::shared_ptr<tcp::socket>> clients_;
  std::vector<std::thread> echoes_;
  std::thread thread_;
};

// A blocking client socket with a receive timeout, so a broken server cannot hang a test.
struct Client {
  asio::io_context ctx;
  tcp::socket s{ctx};
  explicit Client(tcp::endpoint ep) { s.connect(ep); }
  void send(const Octets& b) { asio::write(s, asio::buffer(b)); }
  // Reads exactly n bytes, or fewer on EOF/error or after 5 s without progress (poll: Asio's
  // synchronous reads ignore SO_RCVTIMEO).
  Octets recv(size_t n) {
    Octets b(n);
    size_t got = 0;
    while (got < n) {
      pollfd p{s.native_handle(), POLLIN, 0};
      if (::poll(&p, 1, 5000) <= 0) break;
      ssize_t r = ::recv(s.native_handle(), b.data() + got, n - got, 0);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    b.resize(got);
    return b;
  }
  // True when the server closed the connection (EOF or reset) within 5 s without sending
  // anything more.
  bool closed() {
    pollfd p{s.native_handle(), POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return false;
    uint8_t c;
    ssize_t r = ::recv(s.native_handle(), &c, 1, 0);
    return r == 0 || (r < 0 && errno == ECONNRESET);
  }
};

Octets connect_ipv4(uint16_t port) {
  return {0x05,
          0x01,
          0x00,
          0x01,
          127,
          0,
          0,
          1,
          static_cast<uint8_t>(port >> 8),
          static_cast<uint8_t>(port & 0xFF)};
}

// Method selection 00, then a failure reply with `code` and 0.0.0.0:0.
Octets failed_request(uint8_t code) {
  return {0x05, 0x00, 0x05, code, 0x00, 0x01, 0, 0, 0, 0, 0, 0};
}

uint16_t reply_port(const Octets& r) { return static_cast<uint16_t>(r[8] << 8 | r[9]); }

konn::socks5::Socks5Options defaults() {
  konn::socks5::Socks5Options o;
  o.handshake_timeout = 2s;
  o.connect_timeout = 2s;
  o.health_port = 0;  // any free port: tests run in parallel
  o.health_bind_address = "127.0.0.1";
  return o;
}

// The value of one sample ("name{labels}" exactly as serialised), or -1 when absent.
double sample(konn::socks5::Socks5App& app, const std::string& series) {
  std::istringstream in(app.metrics().registry().serialize());
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

// Polls until `cond` holds or 3 s pass (sessions count themselves closed just after the client
// saw the close).
bool eventually(const std::function<bool()>& cond) {
  auto deadline = std::chrono::steady_clock::now() + 3s;
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// A destination that never answers a SYN, without leaving loopback: a listener with backlog 0
// whose accept queue is filled by connections nobody accepts. Linux then drops every further
// SYN (ListenOverflows), so a connect to it hangs until its own timeout.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    auto* sa = reinterpret_cast<sockaddr*>(&a);
    if (fd_ < 0 || ::bind(fd_, sa, len) != 0 || ::listen(fd_, 0) != 0 ||
        ::getsockname(fd_, sa, &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    // Connect until one connection stays unanswered: from then on the queue is full.
    for (int i = 0; i < 8 && !silent_; ++i) {
      int c = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (c < 0) return;
      fillers_.push_back(c);
      if (::connect(c, sa, len) == 0) continue;
      if (errno != EINPROGRESS) return;
      pollfd p{c, POLLOUT, 0};
      silent_ = ::poll(&p, 1, 200) == 0;
    }
  }
  ~SilentListener() {
    for (int c : fillers_) ::close(c);
    if (fd_ >= 0) ::close(fd_);
  }
  // False when this machine answered every SYN (the test cannot run here).
  bool silent() const { return silent_; }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  bool silent_ = false;
  std::vector<int> fillers_;
};

// A greeting (method 00), then a CONNECT to [::1]:port (ATYP 04).
Octets connect_ipv6_loopback(uint16_t port) {
  Octets b{0x05, 0x01, 0x00, 0x05, 0x01, 0x00, 0x04};
  auto a = asio::ip::make_address_v6("::1").to_bytes();
  b.insert(b.end(), a.begin(), a.end());
  b.push_back(static_cast<uint8_t>(port >> 8));
  b.push_back(static_cast<uint8_t>(port & 0xFF));
  return b;
}

// A users file in a fresh temp dir, removed with it.
struct UsersFile {
  std::filesystem::path dir;
  std::string path;
  UsersFile(const std::string& user, const std::string& password) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "konn-s5-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
    path = (dir / "users").string();
    crypt_data data{};
    std::ofstream(path) << user << ":" << crypt_r(password.c_str(), "$6$saltsalt$", &data) << "\n";
  }
  ~UsersFile() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

// RFC 1929 username/password message.
Octets user_pass(const std::string& user, const std::string& password) {
  Octets b{0x01, static_cast<uint8_t>(user.size())};
  b.insert(b.end(), user.begin(), user.end());
  b.push_back(static_cast<uint8_t>(password.size()));
  b.insert(b.end(), password.begin(), password.end());
  return b;
}

// Forces splice(2) to fail as a kernel without support would, for the duration of a test.
struct SpliceUnsupported {
  static ssize_t fail(int, loff_t*, int, loff_t*, size_t, unsigned int) {
    errno = EINVAL;
    return -1;
  }
  SpliceUnsupported() { konn::socks5::set_splice_function_for_testing(&fail); }
  ~SpliceUnsupported() { konn::socks5::set_splice_function_for_testing(nullptr); }
};

}  // namespace

TEST_CASE("CONNECT byte by byte, the reply carries the address the destination saw", "[session]") {
  EchoServer echo;
  TestServer server(defaults());
  Client c(server.endpoint());
  Octets all{0x05, 0x01, 0x00};
  auto req = connect_ipv4(echo.port());
  all.insert(all.end(), req.begin(), req.end());
  for (size_t i = 0; i < 3; ++i) c.send({all[i]});
  CHECK(c.recv(2) == Octets{0x05, 0x00});
  for (size_t i = 3; i < all.size(); ++i) c.send({all[i]});
  auto reply = c.recv(10);
  REQUIRE(reply.size() == 10);
  CHECK(reply[1] == 0x00);
  auto seen = echo.peers.get_future().get();
  CHECK(reply_port(reply) == seen.port());
  c.send({'p', 'i', 'n', 'g'});
  CHECK(c.recv(4) == Octets{'p', 'i', 'n', 'g'});
}

TEST_CASE("greeting, request and first data coalesced in one write", "[session]") {
  EchoServer echo;
  TestServer server(defaults());
  Client c(server.endpoint());
  Octets all{0x05, 0x01, 0x00};
  auto req = connect_ipv4(echo.port());
  all.insert(all.end(), req.begin(), req.end());
  all.insert(all.end(), {'h', 'e', 'l', 'l', 'o'});
  c.send(all);
  CHECK(c.recv(2) == Octets{0x05, 0x00});
  CHECK(c.recv(10)[1] == 0x00);
  CHECK(c.recv(5) == Octets{'h', 'e', 'l', 'l', 'o'});
}

// reliability: socks5 | SOCKS4 greeting, or HTTP instead of SOCKS | closed without a reply | info
// reliability+: "close ... reason="not SOCKS5 (version byte 4)"" | another session keeps relaying
// reliability: socks5 | greeting with zero methods, or offering only an unknown method | `05 FF`,
// reliability+: closed | info "close ... reason="greeting with zero methods"" or "no acceptable
// reliability+: method" | another session keeps relaying
// reliability: socks5 | request with a bad ATYP, a zero-length name, or an unknown command | reply
// reliability+: `08`, `01` or `07`, closed | info "close ... reason="bad request"" | another
// reliability+: session keeps relaying
// reliability: socks5 | request with version 4 | closed without a reply | info "close ...
// reliability+: reason="request with wrong version"" | another session keeps relaying
TEST_CASE("malformed input gets its RFC answer or a close, other sessions unaffected",
          "[session]") {
  EchoServer echo;
  auto o = defaults();
  o.handshake_timeout = 500ms;
  TestServer server(o);
  // A healthy session that stays open through all of it.
  Client healthy(server.endpoint());
  healthy.send({0x05, 0x01, 0x00});
  REQUIRE(healthy.recv(2) == Octets{0x05, 0x00});
  healthy.send(connect_ipv4(echo.port()));
  REQUIRE(healthy.recv(10)[1] == 0x00);

  struct Case {
    const char* name;
    Octets send;
    Octets expect;  // then the server closes
  };
  std::vector<Case> cases{
      {"wrong version (SOCKS4)", {0x04, 0x01, 0x00, 0x50, 127, 0, 0, 1, 0}, {}},
      {"HTTP instead of SOCKS", {'G', 'E', 'T', ' ', '/'}, {}},
      {"zero methods", {0x05, 0x00}, {0x05, 0xFF}},
      {"unknown method only", {0x05, 0x01, 0x80}, {0x05, 0xFF}},
      {"bad ATYP", {0x05, 0x01, 0x00, 0x05, 0x01, 0x00, 0x09, 1, 2}, failed_request(0x08)},
      {"zero-length name",
       {0x05, 0x01, 0x00, 0x05, 0x01, 0x00, 0x03, 0x00, 0x00, 0x50},
       failed_request(0x01)},
      {"unknown command",
       {0x05, 0x01, 0x00, 0x05, 0x09, 0x00, 0x01, 127, 0, 0, 1, 0, 80},
       failed_request(0x07)},
      {"request with wrong version", {0x05, 0x01, 0x00, 0x04, 0x01, 0x00, 0x01}, {0x05, 0x00}},
  };
  for (const auto& tc : cases) {
    INFO(tc.name);
    Client c(server.endpoint());
    c.send(tc.send);
    auto got = c.recv(tc.expect.size());
    CHECK(Octets(got.begin(), got.begin() + static_cast<long>(std::min(
                                               got.size(), tc.expect.size()))) == tc.expect);
    CHECK(c.closed());
  }
  // reliability: socks5 | request cut short, then EOF | closed | info "close ... reason="closed
  // reliability+: during request"" | another session keeps relaying
  SECTION("truncated request then EOF") {
    Client c(server.endpoint());
    c.send({0x05, 0x01, 0x00, 0x05, 0x01, 0x00, 0x03, 0x0A, 'a', 'b'});
    CHECK(c.recv(2) == Octets{0x05, 0x00});
    c.s.shutdown(tcp::socket::shutdown_send);
    CHECK(c.closed());
  }
  // reliability: socks5 | greeting sent a byte at a time (slowloris) | closed at
  // reliability+: --handshake-timeout | info "close ... reason="handshake timeout"" | another
  // reliability+: session keeps relaying
  SECTION("slowloris is closed at the handshake timeout") {
    Client c(server.endpoint());
    auto start = std::chrono::steady_clock::now();
    c.send({0x05});
    std::this_thread::sleep_for(100ms);  // Exception: simulating a slow client needs pauses
    c.send({0x01});
    CHECK(c.closed());
    auto took = std::chrono::steady_clock::now() - start;
    CHECK(took >= 450ms);
    CHECK(took < 3s);
  }
  // The healthy session still works.
  healthy.send({'o', 'k'});
  CHECK(healthy.recv(2) == Octets{'o', 'k'});
}

// reliability: socks5 | CONNECT to a closed port | reply `05`, closed | info "close ...
// reliability+: reason="connect: ..."" | socks5
TEST_CASE("refused destination gets 05, a rule denial gets 02", "[session]") {
  auto o = defaults();
  o.rules = {"deny to=127.0.0.2/32"};
  TestServer server(o);
  // A port that refuses: bind, then close.
  uint16_t closed_port;
  {
    asio::io_context ctx;
    auto a = konn::core::net::listen_tcp(ctx, "127.0.0.1", 0);
    closed_port = a.local_endpoint().port();
  }
  Client c(server.endpoint());
  c.send({0x05, 0x01, 0x00});
  c.recv(2);
  c.send(connect_ipv4(closed_port));
  CHECK(c.recv(10) == Octets{0x05, 0x05, 0x00, 0x01, 0, 0, 0, 0, 0, 0});
  CHECK(c.closed());

  Client d(server.endpoint());
  d.send({0x05, 0x01, 0x00, 0x05, 0x01, 0x00, 0x01, 127, 0, 0, 2, 0, 80});
  d.recv(2);
  CHECK(d.recv(10)[1] == 0x02);
  CHECK(d.closed());
}

// reliability: socks5 | established session with no traffic | closed at --idle-timeout | info
// reliability+: "close ... reason="idle timeout"" | socks5
TEST_CASE("idle sessions are closed after the idle timeout", "[session]") {
  EchoServer echo;
  auto o = defaults();
  o.idle_timeout = 300ms;
  TestServer server(o);
  Client c(server.endpoint());
  c.send({0x05, 0x01, 0x00});
  c.recv(2);
  c.send(connect_ipv4(echo.port()));
  REQUIRE(c.recv(10)[1] == 0x00);
  auto start = std::chrono::steady_clock::now();
  CHECK(c.closed());
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 250ms);
  CHECK(took < 3s);
}

// reliability: socks5 | connection over --max-sessions-per-client | closed without a byte | warn
// reliability+: "refused 127.0.0.1: max-sessions-per-client 1 reached for ..." | the first session;
// reliability+: a new one once it ends
TEST_CASE("per-client session limit closes the extra connection", "[session]") {
  auto o = defaults();
  o.max_sessions_per_client = 1;
  TestServer server(o);
  Client first(server.endpoint());
  first.send({0x05, 0x01, 0x00});
  REQUIRE(first.recv(2) == Octets{0x05, 0x00});
  Client second(server.endpoint());
  CHECK(second.closed());
  first.s.close();
  // Once the first is gone a new one is admitted (poll: the slot frees asynchronously).
  auto deadline = std::chrono::steady_clock::now() + 3s;
  while (server.app().active_sessions() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  Client third(server.endpoint());
  third.send({0x05, 0x01, 0x00});
  CHECK(third.recv(2) == Octets{0x05, 0x00});
}

TEST_CASE("buffered relay (--splice=false) carries data and the half-close", "[session]") {
  EchoServer echo;
  auto o = defaults();
  o.splice = false;
  o.buffer_size = 4096;
  TestServer server(o);
  Client c(server.endpoint());
  Octets all{0x05, 0x01, 0x00};
  auto req = connect_ipv4(echo.port());
  all.insert(all.end(), req.begin(), req.end());
  c.send(all);
  CHECK(c.recv(2) == Octets{0x05, 0x00});
  REQUIRE(c.recv(10)[1] == 0x00);
  Octets big(200000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7);
  std::thread writer([&] {
    c.send(big);
    c.s.shutdown(tcp::socket::shutdown_send);
  });
  CHECK(c.recv(big.size()) == big);
  writer.join();
  CHECK(c.closed());  // the echo server's EOF came back through the relay
}

TEST_CASE("a destination that never answers the SYN gets 06 at --connect-timeout", "[session]") {
  SilentListener silent;
  if (!silent.silent()) {
    WARN("every SYN to a full backlog-0 listener was answered here: cannot test the timeout");
    return;
  }
  auto o = defaults();
  o.connect_timeout = 300ms;
  TestServer server(o);
  EchoServer echo;
  // Another session, relaying, is not held up by the one waiting for its connect.
  Client healthy(server.endpoint());
  healthy.send({0x05, 0x01, 0x00});
  REQUIRE(healthy.recv(2) == Octets{0x05, 0x00});
  healthy.send(connect_ipv4(echo.port()));
  REQUIRE(healthy.recv(10)[1] == 0x00);

  Client c(server.endpoint());
  c.send({0x05, 0x01, 0x00});
  REQUIRE(c.recv(2) == Octets{0x05, 0x00});
  auto start = std::chrono::steady_clock::now();
  c.send(connect_ipv4(silent.port()));
  CHECK(c.recv(10) == Octets{0x05, 0x06, 0x00, 0x01, 0, 0, 0, 0, 0, 0});
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 250ms);
  CHECK(took < 3s);
  CHECK(c.closed());
  healthy.send({'o', 'k'});
  CHECK(healthy.recv(2) == Octets{'o', 'k'});
  CHECK(sample(server.app(),
               R"(konn_socks5_dial_failures_total{reason="timeout",upstream="direct"})") == 1);
  CHECK(sample(server.app(), R"(konn_socks5_replies_total{code="06"})") == 1);
}

TEST_CASE("max-sessions limit: the connection over the limit is closed unanswered and counted",
          "[session]") {
  EchoServer echo;
  auto o = defaults();
  o.max_sessions = 1;
  TestServer server(o);
  Client first(server.endpoint());
  first.send({0x05, 0x01, 0x00});
  REQUIRE(first.recv(2) == Octets{0x05, 0x00});
  first.send(connect_ipv4(echo.port()));
  REQUIRE(first.recv(10)[1] == 0x00);

  // Accepted by the kernel, then closed by the daemon before any SOCKS byte.
  Client second(server.endpoint());
  second.send({0x05, 0x01, 0x00});
  CHECK(second.closed());
  CHECK(sample(server.app(), R"(konn_socks5_sessions_refused_total{limit="max_sessions"})") == 1);
  CHECK(sample(server.app(), "konn_socks5_sessions_total") == 1);
  // The first session keeps relaying.
  first.send({'s', 't', 'i', 'l', 'l'});
  CHECK(first.recv(5) == Octets{'s', 't', 'i', 'l', 'l'});
}

TEST_CASE("CONNECT to [::1] (ATYP 04): the reply carries the IPv6 address the destination saw",
          "[session][ipv6]") {
  std::unique_ptr<EchoServer> echo;
  try {
    echo = std::make_unique<EchoServer>("::1");
  } catch (const std::system_error& e) {
    WARN("no ::1 on this machine (" << e.what() << "): IPv6 CONNECT not tested");
    return;
  }
  TestServer server(defaults());
  Client c(server.endpoint());
  c.send(connect_ipv6_loopback(echo->port()));
  REQUIRE(c.recv(2) == Octets{0x05, 0x00});
  auto reply = c.recv(22);
  REQUIRE(reply.size() == 22);
  CHECK(reply[1] == 0x00);
  CHECK(reply[3] == 0x04);
  auto seen = echo->peers.get_future().get();
  asio::ip::address_v6::bytes_type addr;
  std::copy(reply.begin() + 4, reply.begin() + 20, addr.begin());
  CHECK(asio::ip::address_v6(addr) == seen.address());
  CHECK(static_cast<uint16_t>(reply[20] << 8 | reply[21]) == seen.port());
  c.send({'v', '6'});
  CHECK(c.recv(2) == Octets{'v', '6'});
}

TEST_CASE("reply_for_dial_failure maps every Konnectivity dial failure", "[session][upstream]") {
  using konn::core::konnectivity::DialFailure;
  using konn::socks5::codec::ReplyCode;
  using konn::socks5::detail::reply_for_dial_failure;
  CHECK(reply_for_dial_failure(DialFailure::None) == ReplyCode::Succeeded);
  CHECK(reply_for_dial_failure(DialFailure::Refused) == ReplyCode::ConnectionRefused);
  CHECK(reply_for_dial_failure(DialFailure::NetUnreachable) == ReplyCode::NetworkUnreachable);
  CHECK(reply_for_dial_failure(DialFailure::HostUnreachable) == ReplyCode::HostUnreachable);
  CHECK(reply_for_dial_failure(DialFailure::Timeout) == ReplyCode::TtlExpired);
  CHECK(reply_for_dial_failure(DialFailure::NoAgent) == ReplyCode::HostUnreachable);
  CHECK(reply_for_dial_failure(DialFailure::ProxyUnavailable) == ReplyCode::GeneralFailure);
  CHECK(reply_for_dial_failure(DialFailure::Other) == ReplyCode::GeneralFailure);
  // The wire values the README promises.
  CHECK(static_cast<int>(ReplyCode::HostUnreachable) == 0x04);
  CHECK(static_cast<int>(ReplyCode::TtlExpired) == 0x06);
  CHECK(static_cast<int>(ReplyCode::GeneralFailure) == 0x01);
}

TEST_CASE("malformed RFC 1929 messages get 01 01 and a close, other sessions unaffected",
          "[session][auth]") {
  EchoServer echo;
  UsersFile users("alice", "secret");
  auto o = defaults();
  o.users_file = users.path;
  TestServer server(o);
  Client healthy(server.endpoint());
  healthy.send({0x05, 0x01, 0x02});
  REQUIRE(healthy.recv(2) == Octets{0x05, 0x02});
  healthy.send(user_pass("alice", "secret"));
  REQUIRE(healthy.recv(2) == Octets{0x01, 0x00});
  healthy.send(connect_ipv4(echo.port()));
  REQUIRE(healthy.recv(10)[1] == 0x00);

  struct Case {
    const char* name;
    Octets auth;
  };
  std::vector<Case> cases{
      {"sub-negotiation version 2",
       {0x02, 0x05, 'a', 'l', 'i', 'c', 'e', 0x06, 's', 'e', 'c', 'r', 'e', 't'}},
      {"sub-negotiation version 5 (a second greeting)", {0x05, 0x01, 0x02}},
      {"ULEN 0", {0x01, 0x00, 0x06, 's', 'e', 'c', 'r', 'e', 't'}},
  };
  for (const auto& tc : cases) {
    INFO(tc.name);
    Client c(server.endpoint());
    c.send({0x05, 0x01, 0x02});
    REQUIRE(c.recv(2) == Octets{0x05, 0x02});
    c.send(tc.auth);
    CHECK(c.recv(2) == Octets{0x01, 0x01});
    CHECK(c.closed());
  }
  healthy.send({'o', 'k'});
  CHECK(healthy.recv(2) == Octets{'o', 'k'});
  // Only the healthy session is left.
  CHECK(eventually([&] { return server.app().active_sessions() == 1; }));
}

TEST_CASE("splice(2) unsupported at run time: the session relays through buffers instead",
          "[session][splice]") {
  EchoServer echo;
  auto o = defaults();
  REQUIRE(o.splice);
  TestServer server(o);
  SpliceUnsupported no_splice;
  Client c(server.endpoint());
  c.send({0x05, 0x01, 0x00});
  REQUIRE(c.recv(2) == Octets{0x05, 0x00});
  c.send(connect_ipv4(echo.port()));
  REQUIRE(c.recv(10)[1] == 0x00);
  Octets big(300000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 13);
  std::thread writer([&] {
    c.send(big);
    c.s.shutdown(tcp::socket::shutdown_send);
  });
  CHECK(c.recv(big.size()) == big);
  writer.join();
  CHECK(c.closed());  // half-close passed on both ways, as with splice
  CHECK(
      eventually([&] { return sample(server.app(), "konn_socks5_splice_fallbacks_total") == 1; }));
  CHECK(eventually([&] {
    return sample(server.app(), R"(konn_socks5_bytes_total{direction="up"})") == big.size();
  }));
}

namespace {

// A destination that reads until its client's EOF and then neither writes nor closes (a peer
// that ignores the FIN). The destructor releases it.
class FinIgnorer {
 public:
  FinIgnorer() : acceptor_(konn::core::net::listen_tcp(ctx_, "127.0.0.1", 0)) {
    thread_ = std::thread([this] {
      std::error_code ec;
      acceptor_.accept(peer_, ec);
      if (ec) return;
      std::array<char, 4096> b;
      while (!ec) peer_.read_some(asio::buffer(b), ec);
      saw_eof_ = ec == asio::error::eof;
      release_.get_future().wait();
    });
  }
  ~FinIgnorer() {
    release_.set_value();
    std::error_code ec;
    acceptor_.cancel(ec);
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  bool saw_eof() const { return saw_eof_.load(); }

 private:
  asio::io_context ctx_;
  tcp::acceptor acceptor_;
  tcp::socket peer_{ctx_};
  std::atomic<bool> saw_eof_{false};
  std::promise<void> release_;
  std::thread thread_;
};

}  // namespace

TEST_CASE("a half-closed session whose peer never finishes is closed at --half-close-timeout",
          "[session]") {
  bool splice = GENERATE(true, false);
  INFO("splice " << splice);
  FinIgnorer dest;
  auto o = defaults();
  o.splice = splice;
  o.idle_timeout = std::chrono::hours(1);
  o.half_close_timeout = 300ms;
  TestServer server(o);
  Client c(server.endpoint());
  c.send({0x05, 0x01, 0x00});
  c.recv(2);
  c.send(connect_ipv4(dest.port()));
  REQUIRE(c.recv(10)[1] == 0x00);
  c.send({'h', 'i'});
  ::shutdown(c.s.native_handle(), SHUT_WR);  // our half-close; the destination ignores it
  auto start = std::chrono::steady_clock::now();
  CHECK(c.closed());
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 250ms);
  CHECK(took < 3s);
  CHECK(dest.saw_eof());
}
