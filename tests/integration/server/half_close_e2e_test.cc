// A CONNECT client's close must end its tunnel (issue 21): kube-apiserver ends every HTTPConnect
// tunnel with a plain close(), and a destination that ignores the FIN must not keep the tunnel
// open on either daemon. Default: the client's EOF closes the tunnel (upstream's behaviour).
// With --http-connect-half-close the EOF is passed on, bounded by --half-close-timeout.
#include <atomic>
#include <chrono>
#include <dirent.h>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <vector>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <catch2/catch.hpp>

#include "core/konnectivity/dialer.h"
#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

using namespace std::chrono_literals;
using konn::e2e::FleetAgent;
using konn::e2e::FleetServer;
using konn::e2e::kServer;
using konn::testsupport::eventually;

namespace {

const std::string kAgent = "konnectivity_network_proxy_agent_";

// A destination that reads what it is sent and, depending on `answer_after_eof`:
//  - false: answers "answer\n" to the first bytes, then never writes again and never closes,
//    not even after the FIN (the aggregated API backend of issue 21);
//  - true: reads until EOF, then sends `answer_bytes` bytes and closes (a request/response
//    protocol that needs the client's half-close).
class Destination {
 public:
  explicit Destination(bool answer_after_eof = false, size_t answer_bytes = 0)
      : answer_after_eof_(answer_after_eof), answer_bytes_(answer_bytes) {
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~Destination() {
    asio::post(io_, [this] {
      std::error_code ignored;
      acceptor_.close(ignored);
      for (auto& c : conns_) c->socket.close(ignored);
    });
    guard_.reset();
    io_.stop();
    thread_.join();
  }
  std::string address() const {
    return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  int eofs() const { return eofs_.load(); }
  int accepted() const { return accepted_.load(); }

 private:
  struct Conn {
    explicit Conn(asio::io_context& io) : socket(io) {}
    asio::ip::tcp::socket socket;
    char buf[16384];
    bool answered = false;
    std::string answer;
  };
  void accept() {
    acceptor_.async_accept([this](std::error_code ec, asio::ip::tcp::socket s) {
      if (ec) return;
      ++accepted_;
      conns_.push_back(std::make_unique<Conn>(io_));
      conns_.back()->socket = std::move(s);
      read(conns_.back().get());
      accept();
    });
  }
  void read(Conn* c) {
    c->socket.async_read_some(asio::buffer(c->buf), [this, c](std::error_code ec, size_t n) {
      if (ec == asio::error::eof) {
        ++eofs_;
        if (answer_after_eof_) {
          c->answer.assign(answer_bytes_, 'a');
          asio::async_write(c->socket, asio::buffer(c->answer), [c](std::error_code, size_t) {
            std::error_code ignored;
            c->socket.close(ignored);
          });
        }
        return;  // otherwise: the FIN is ignored, the socket stays open
      }
      if (ec) return;
      if (n > 0 && !answer_after_eof_ && !c->answered) {
        c->answered = true;
        asio::async_write(c->socket, asio::buffer("answer\n", 7), [](std::error_code, size_t) {});
      }
      read(c);
    });
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_{io_.get_executor()};
  asio::ip::tcp::acceptor acceptor_{io_, {asio::ip::make_address("127.0.0.1"), 0}};
  std::list<std::unique_ptr<Conn>> conns_;
  std::atomic<int> eofs_{0};
  std::atomic<int> accepted_{0};
  bool answer_after_eof_;
  size_t answer_bytes_;
  std::thread thread_;
};

// One CONNECT client, over the unix socket or TCP + mTLS (as kube-apiserver's HTTPConnect).
class Client {
 public:
  // Connects, sends the CONNECT and reads exactly the 200 line.
  Client(const FleetServer& s, uint16_t tcp_port, const std::string& target) {
    const std::string request = "CONNECT " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    if (tcp_port == 0) {
      unix_.emplace(io_);
      unix_->connect(asio::local::stream_protocol::endpoint(s.uds_path()));
      fd_ = unix_->native_handle();
    } else {
      const auto& certs = konn::testsupport::test_certs();
      ssl_ctx_.load_verify_file(certs.ca_crt);
      ssl_ctx_.use_certificate_chain_file(certs.client_crt);
      ssl_ctx_.use_private_key_file(certs.client_key, asio::ssl::context::pem);
      ssl_ctx_.set_verify_mode(asio::ssl::verify_peer);
      tls_.emplace(io_, ssl_ctx_);
      tls_->lowest_layer().connect({asio::ip::make_address("127.0.0.1"), tcp_port});
      tls_->handshake(asio::ssl::stream_base::client);
      fd_ = tls_->lowest_layer().native_handle();
    }
    write(request);
    const std::string want = "HTTP/1.1 200 Connection Established\r\n\r\n";
    std::string got(want.size(), '\0');
    if (unix_) {
      asio::read(*unix_, asio::buffer(got));
    } else {
      asio::read(*tls_, asio::buffer(got));
    }
    REQUIRE(got == want);
  }
  void write(const std::string& bytes) {
    if (unix_) {
      asio::write(*unix_, asio::buffer(bytes));
    } else {
      asio::write(*tls_, asio::buffer(bytes));
    }
  }
  // Reads exactly `n` bytes.
  std::string read(size_t n) {
    std::string out(n, '\0');
    if (unix_) {
      asio::read(*unix_, asio::buffer(out));
    } else {
      asio::read(*tls_, asio::buffer(out));
    }
    return out;
  }
  // Everything until the server's EOF (unix socket only), waiting with poll().
  std::string read_to_eof(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string out;
    char buf[65536];
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd pfd{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) {
        FAIL_CHECK("no EOF within " << timeout.count() << " ms; got " << out.size() << " bytes");
        return out;
      }
      ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        out.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        return out;
      }
    }
  }
  // shutdown(SHUT_WR): a real half-close (unix socket only).
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  // What kube-apiserver does at the end of every tunnel: close() (a TLS client sends its
  // close_notify first, as Go's tls.Conn.Close does).
  void close() {
    std::error_code ignored;
    if (unix_) {
      unix_->close(ignored);
    } else {
      SSL_shutdown(tls_->native_handle());
      tls_->lowest_layer().close(ignored);
    }
  }

 private:
  asio::io_context io_;
  asio::ssl::context ssl_ctx_{asio::ssl::context::tls_client};
  std::optional<asio::local::stream_protocol::socket> unix_;
  std::optional<asio::ssl::stream<asio::ip::tcp::socket>> tls_;
  int fd_ = -1;
};

// Open descriptors of a process.
int fd_count(pid_t pid) {
  int n = 0;
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  while (auto* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n;
}

// A proxy-server in http-connect mode (unix socket, or TCP + mTLS when `tcp`) and one agent.
struct Stack {
  Stack(bool tcp, std::vector<std::string> server_args, std::vector<std::string> agent_args = {})
      : server(certs, tcp ? "hc-tcp" : "hc-unix", with_mode(std::move(server_args))) {
    if (tcp) tcp_port = server.use_tcp_frontend();
    server.start();
    agent = std::make_unique<FleetAgent>(dir, certs, "agent-1", server.agent_port(),
                                         std::move(agent_args));
    REQUIRE(eventually([&] { return server.ready_agents() == 1; }, 20s));
  }
  static std::vector<std::string> with_mode(std::vector<std::string> args) {
    args.insert(args.begin(), "--mode=http-connect");
    return args;
  }
  double server_gauge(const std::string& name) const {
    return server.metric(name.rfind("konn", 0) == 0 ? name : kServer + name).value_or(-1);
  }
  double agent_gauge(const std::string& name) const { return agent->metric(name).value_or(-1); }
  // The tunnel gauges of both daemons, as "name=value ..." (for messages), and whether all are
  // `want`.
  bool gauges_are(double want, std::string* seen = nullptr) const {
    double values[] = {server_gauge("http_connections"), server_gauge("established_connections"),
                       server_gauge("half_closed_tunnels"),
                       agent_gauge(kAgent + "open_endpoint_connections"),
                       agent_gauge("konn_agent_half_closed_connections")};
    if (seen != nullptr) {
      *seen = "http_connections=" + std::to_string(values[0]) +
              " established_connections=" + std::to_string(values[1]) +
              " half_closed_tunnels=" + std::to_string(values[2]) +
              " agent open_endpoint_connections=" + std::to_string(values[3]) +
              " agent half_closed_connections=" + std::to_string(values[4]);
    }
    for (double v : values) {
      if (v != want) return false;
    }
    return true;
  }
  konn::testsupport::TempDir dir{"konn-hc21"};
  const konn::testsupport::TestCerts& certs = konn::testsupport::test_certs();
  FleetServer server;
  uint16_t tcp_port = 0;
  std::unique_ptr<FleetAgent> agent;
};

// Waits until every tunnel gauge of both daemons is 0; how long that took (or nullopt).
std::optional<std::chrono::milliseconds> wait_idle(const Stack& st, std::chrono::milliseconds max) {
  auto t0 = std::chrono::steady_clock::now();
  if (!eventually([&] { return st.gauges_are(0); }, max)) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               t0);
}

}  // namespace

// reliability: proxy-server | CONNECT client closes (kube-apiserver's close()) while the
// reliability+: destination ignores the FIN | queued DATA to the agent, `CLOSE_REQ`, client socket
// reliability+: closed | debug line with the connection id | every tunnel gauge of both daemons
// reliability+: back to 0 within 1 s
TEST_CASE(
    "http-connect: a client's close ends the tunnel at once, even when the destination "
    "ignores the FIN",
    "[e2e][http-connect][half-close]") {
  KONN_REQUIRE_DAEMONS();
  for (bool tcp : {false, true}) {
    INFO((tcp ? "TCP + mTLS frontend" : "unix socket frontend"));
    Stack st(tcp, {});
    Destination dest;
    Client c(st.server, st.tcp_port, dest.address());
    c.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(c.read(7) == "answer\n");
    std::string seen;
    CHECK(st.server_gauge("established_connections") == 1);
    CHECK(st.agent_gauge(kAgent + "open_endpoint_connections") == 1);
    c.close();
    auto took = wait_idle(st, 1s);
    st.gauges_are(0, &seen);
    INFO("gauges: " << seen);
    CHECK(took);
    // The agent closed its destination connection (the destination saw its EOF).
    CHECK(eventually([&] { return dest.eofs() == 1; }, 2s));
    CHECK(st.server.metric(kServer + "tunnel_timeouts_total", {{"reason", "half_close"}}) == 0);
  }
}

// reliability: proxy-server | with --http-connect-half-close, a half-closed tunnel that moves
// reliability+: nothing | closed at --half-close-timeout: `CLOSE_REQ` to the agent, client socket
// reliability+: closed | info "closing: half-closed tunnel quiet for 1s (--half-close-timeout)" |
// reliability+: gauges of both daemons back to 0; `tunnel_timeouts_total{reason="half_close"}`
TEST_CASE(
    "http-connect with --http-connect-half-close: a closed client's tunnel ends at "
    "--half-close-timeout",
    "[e2e][http-connect][half-close]") {
  KONN_REQUIRE_DAEMONS();
  for (bool tcp : {false, true}) {
    INFO((tcp ? "TCP + mTLS frontend" : "unix socket frontend"));
    Stack st(tcp, {"--http-connect-half-close", "--half-close-timeout=1s"});
    Destination dest;
    Client c(st.server, st.tcp_port, dest.address());
    c.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(c.read(7) == "answer\n");
    auto closed_at = std::chrono::steady_clock::now();
    c.close();
    // The EOF went on as a half-close: the destination saw it, and both daemons show the tunnel
    // with one side finished.
    CHECK(eventually([&] { return dest.eofs() == 1; }, 2s));
    CHECK(eventually(
        [&] {
          return st.server_gauge("half_closed_tunnels") == 1 &&
                 st.agent_gauge("konn_agent_half_closed_connections") == 1;
        },
        800ms));
    std::string seen;
    bool idle = eventually([&] { return st.gauges_are(0); }, 4s);
    auto took = std::chrono::steady_clock::now() - closed_at;
    st.gauges_are(0, &seen);
    INFO("gauges: " << seen);
    CHECK(idle);
    CHECK(took >= 900ms);  // not before the timeout
    CHECK(took < 2500ms);
    CHECK(st.server.metric(kServer + "tunnel_timeouts_total", {{"reason", "half_close"}}) == 1);
  }
}

TEST_CASE(
    "http-connect with --http-connect-half-close: the agent's own --half-close-timeout "
    "ends a tunnel the server keeps",
    "[e2e][http-connect][half-close]") {
  KONN_REQUIRE_DAEMONS();
  Stack st(false, {"--http-connect-half-close", "--half-close-timeout=30s"},
           {"--half-close-timeout=1s"});
  Destination dest;
  Client c(st.server, 0, dest.address());
  c.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(c.read(7) == "answer\n");
  c.close();
  std::string seen;
  bool idle = eventually([&] { return st.gauges_are(0); }, 4s);
  st.gauges_are(0, &seen);
  INFO("gauges: " << seen);
  CHECK(idle);
  CHECK(st.agent->metric("konn_agent_half_close_timeouts_total") == 1);
}

TEST_CASE(
    "http-connect with --http-connect-half-close: a client that half-closes still gets "
    "the whole answer",
    "[e2e][http-connect][half-close]") {
  KONN_REQUIRE_DAEMONS();
  // The timeout is not what this case measures: long enough for a slow (sanitizer) build.
  Stack st(false, {"--http-connect-half-close", "--half-close-timeout=5s"});
  // The destination answers only once it saw the client's EOF.
  const size_t n = 1u << 20;
  Destination dest(/*answer_after_eof=*/true, n);
  Client c(st.server, 0, dest.address());
  c.write("the whole request");
  c.shutdown_write();
  std::string answer = c.read_to_eof(20s);
  CHECK(answer.size() == n);
  CHECK(answer == std::string(n, 'a'));
  CHECK(wait_idle(st, 2s));
  CHECK(st.server.metric(kServer + "tunnel_timeouts_total", {{"reason", "half_close"}}) == 0);
}

TEST_CASE(
    "http-connect: 200 tunnels closed by their clients against a FIN-ignoring destination "
    "leave no tunnel, gauge or descriptor behind",
    "[e2e][http-connect][half-close]") {
  KONN_REQUIRE_DAEMONS();
  for (bool half_close : {false, true}) {
    INFO((half_close ? "--http-connect-half-close --half-close-timeout=1s" : "default"));
    std::vector<std::string> args;
    if (half_close) args = {"--http-connect-half-close", "--half-close-timeout=1s"};
    Stack st(false, args);
    Destination dest;
    // One tunnel first, so that both daemons' lazily opened descriptors exist.
    {
      Client c(st.server, 0, dest.address());
      c.write("warm-up");
      CHECK(c.read(7) == "answer\n");
      c.close();
    }
    REQUIRE(wait_idle(st, 3s));
    pid_t server_pid = st.server.process().pid();
    pid_t agent_pid = st.agent->process().pid();
    int server_fds = fd_count(server_pid);
    int agent_fds = fd_count(agent_pid);
    REQUIRE(server_fds > 0);
    REQUIRE(agent_fds > 0);
    for (int i = 0; i < 200; ++i) {
      Client c(st.server, 0, dest.address());
      c.write("GET /" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n");
      REQUIRE(c.read(7) == "answer\n");
      c.close();
    }
    std::string seen;
    bool idle = eventually([&] { return st.gauges_are(0); }, half_close ? 5s : 2s);
    st.gauges_are(0, &seen);
    INFO("gauges: " << seen);
    CHECK(idle);
    CHECK(dest.accepted() == 201);
    int server_now = -1;
    int agent_now = -1;
    CHECK(eventually(
        [&] {
          server_now = fd_count(server_pid);
          agent_now = fd_count(agent_pid);
          return server_now <= server_fds && agent_now <= agent_fds;
        },
        3s));
    INFO("server fds " << server_fds << " -> " << server_now << ", agent fds " << agent_fds
                       << " -> " << agent_now);
    CHECK(server_now <= server_fds);
    CHECK(agent_now <= agent_fds);
  }
}

TEST_CASE("http-connect with --tunnel-idle-timeout: a tunnel without traffic is closed, a busy "
          "one is not",
          "[e2e][http-connect][half-close]") {
  KONN_REQUIRE_DAEMONS();
  Stack st(false, {"--tunnel-idle-timeout=1s"});
  Destination dest;
  Client busy(st.server, 0, dest.address());
  busy.write("first");
  CHECK(busy.read(7) == "answer\n");
  Client idle(st.server, 0, dest.address());
  auto opened = std::chrono::steady_clock::now();
  // The busy tunnel sends a byte every 300 ms for 1.8 s; the idle one sends nothing.
  std::thread writer([&] {
    for (int i = 0; i < 6; ++i) {
      std::this_thread::sleep_for(300ms);
      busy.write("x");
    }
  });
  std::string rest = idle.read_to_eof(3s);
  auto took = std::chrono::steady_clock::now() - opened;
  writer.join();
  CHECK(rest.empty());
  CHECK(took >= 900ms);
  CHECK(took < 2500ms);
  CHECK(st.server_gauge("established_connections") == 1);  // the busy one
  CHECK(st.server.metric(kServer + "tunnel_timeouts_total", {{"reason", "idle"}}) == 1);
  busy.close();
  CHECK(wait_idle(st, 2s));
}

TEST_CASE("grpc frontend: a tunnel its client half-closed ends at --half-close-timeout when the "
          "destination ignores the FIN",
          "[e2e][half-close]") {
  KONN_REQUIRE_DAEMONS();
  konn::testsupport::TempDir dir{"konn-hc21-grpc"};
  const auto& certs = konn::testsupport::test_certs();
  FleetServer s(certs, "hc-grpc", {"--half-close-timeout=1s"});
  s.start();
  FleetAgent a(dir, certs, "agent-1", s.agent_port(), {});
  REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));
  Destination dest;
  konn::core::konnectivity::UpstreamOptions upstream;
  upstream.address = "unix:" + s.uds_path();
  asio::io_context io;
  konn::core::konnectivity::Dialer dialer(upstream);
  struct Outcome {
    bool dialled = false;
    bool half_close = false;
    std::string answer;
    bool ended = false;
    std::atomic<bool> finished{false};  // the coroutine returned
    std::chrono::steady_clock::time_point half_closed_at, ended_at;
  } out;
  asio::co_spawn(
      io,
      [&]() -> konn::core::io::Awaitable<void> {
        using konn::core::io::use_nothrow;
        auto d = co_await dialer.dial(dest.address(), 10000ms);
        struct Finish {
          Outcome& o;
          ~Finish() { o.finished = true; }
        } finish{out};
        if (!d.tunnel || d.tunnel->grpc() == nullptr) co_return;
        out.dialled = true;
        auto& t = *d.tunnel->grpc();
        out.half_close = t.half_close();
        co_await asio::async_write(t, asio::buffer(std::string("GET")), use_nothrow);
        std::string answer(7, '\0');
        co_await asio::async_read(t, asio::buffer(answer), use_nothrow);
        out.answer = answer;
        std::error_code ec;
        t.shutdown(asio::socket_base::shutdown_send, ec);  // KONN_CLOSE_WRITE; FIN ignored
        out.half_closed_at = std::chrono::steady_clock::now();
        char buf[256];
        for (;;) {
          auto [rec, n] = co_await t.async_read_some(asio::buffer(buf), use_nothrow);
          if (rec) break;
        }
        out.ended = true;
        out.ended_at = std::chrono::steady_clock::now();
      },
      asio::detached);
  // The dialer's connection runs on `io`'s thread until the end of the test (the call ends after
  // the tunnel), and is closed once that thread stopped.
  auto guard = asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  struct Stop {
    asio::io_context& io;
    std::thread& t;
    ~Stop() {
      io.stop();
      t.join();
    }
  } stop{io, runner};
  REQUIRE(eventually([&] { return out.finished.load(); }, 15s));
  REQUIRE(out.dialled);
  CHECK(out.half_close);
  CHECK(out.answer == "answer\n");
  REQUIRE(out.ended);
  auto took = out.ended_at - out.half_closed_at;
  CHECK(took >= 900ms);
  CHECK(took < 2500ms);
  CHECK(s.metric(kServer + "tunnel_timeouts_total", {{"reason", "half_close"}}) == 1);
  CHECK(eventually(
      [&] {
        return s.metric(kServer + "grpc_connections", {{"service_method", "Proxy"}}) == 0 &&
               s.metric(kServer + "established_connections") == 0 &&
               s.metric(kServer + "half_closed_tunnels") == 0 &&
               a.metric(kAgent + "open_endpoint_connections") == 0 &&
               a.metric("konn_agent_half_closed_connections") == 0;
      },
      2s));
}
