#include "proxy-agent/server_stream_reactor.h"

#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include <catch2/catch.hpp>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/sync_stream.h>

#include "core/io/asio_compat.h"
#include "core/net/listener.h"
#include "core/tunnel/packet.h"
#include "konnectivity/agent.grpc.pb.h"
#include "proxy-agent/agent_app.h"
#include "test-client/grpc_credentials.h"
#include "tests/support/log_capture.h"

// In-process tests of the agent against a tiny AgentService server (sync gRPC API, TLS with
// certificates made by scripts/gen-certs.sh) and real loopback endpoints.

using namespace konn::agent;
namespace tunnel = konn::core::tunnel;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

constexpr milliseconds kWait{10000};  // bound of every wait; tests finish far sooner

std::string source_dir() {
  const char* env = std::getenv("KONN_SOURCE_DIR");
  return env != nullptr ? env : KONN_AGENT_TEST_SOURCE_DIR;
}

// Certificates for every test of this binary, made once.
const std::string& cert_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/konn-agent-test-XXXXXX";
    std::string d = ::mkdtemp(tmpl);
    std::string cmd = "bash '" + source_dir() + "/scripts/gen-certs.sh' '" + d + "'";
    REQUIRE(std::system(cmd.c_str()) == 0);
    return d;
  }();
  return dir;
}

// Polls `cond` until true or the deadline; for state with no event to wait on.
bool eventually(const std::function<bool()>& cond, milliseconds limit = kWait) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// One Connect stream as the fake server sees it.
struct Session {
  grpc::ServerContext* ctx = nullptr;
  grpc::ServerReaderWriter<Packet, Packet>* stream = nullptr;
  std::multimap<std::string, std::string> request_headers;
  std::string server_id;
  std::string authority;  // host:port the agent dialled

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Packet> received;
  bool ended = false;

  std::mutex write_mu;
  bool alive = true;  // the handler runs: stream and ctx are valid

  bool write(const Packet& p) {
    std::lock_guard lock(write_mu);
    return alive && stream->Write(p);
  }
  void kill() {
    std::lock_guard lock(write_mu);
    if (alive) ctx->TryCancel();
  }
  std::string header(const std::string& key) const {
    auto it = request_headers.find(key);
    return it == request_headers.end() ? "<none>" : it->second;
  }
  size_t header_count(const std::string& key) const { return request_headers.count(key); }

  // Removes and returns the first received packet matching `pred`.
  std::optional<Packet> take(const std::function<bool(const Packet&)>& pred,
                             milliseconds limit = kWait) {
    std::unique_lock lock(mu);
    std::optional<Packet> out;
    cv.wait_for(lock, limit, [&] {
      for (auto it = received.begin(); it != received.end(); ++it) {
        if (pred(*it)) {
          out = std::move(*it);
          received.erase(it);
          return true;
        }
      }
      return false;
    });
    return out;
  }
  std::optional<Packet> take_type(int type, milliseconds limit = kWait) {
    return take([type](const Packet& p) { return p.type() == type; }, limit);
  }
  bool has_type(int type) {
    std::lock_guard lock(mu);
    for (const auto& p : received) {
      if (p.type() == type) return true;
    }
    return false;
  }
  // Collects DATA bytes of one connection until `n` arrived.
  std::string take_data(int64_t connect_id, size_t n) {
    std::string out;
    while (out.size() < n) {
      auto p = take([connect_id](const Packet& q) {
        return q.type() == DATA && q.data().connectid() == connect_id;
      });
      if (!p) break;
      out += p->data().data();
    }
    return out;
  }
  size_t queued_data(int64_t connect_id) {
    std::lock_guard lock(mu);
    size_t n = 0;
    for (const auto& p : received) {
      if (p.type() == DATA && p.data().connectid() == connect_id) n += p.data().data().size();
    }
    return n;
  }
  bool wait_ended(milliseconds limit = kWait) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [this] { return ended; });
  }
};

// The proxy-server's AgentService, scripted by the test.
class FakeProxyServer final : public AgentService::Service {
 public:
  struct Config {
    std::vector<std::string> server_ids{"server-1"};  // one per stream, the last repeats
    int64_t server_count = 1;
    bool flow_control = false;
    bool send_server_count = true;
    // After the agent's half-close, keep the stream open until the call is cancelled (a server
    // that ignores half-closes).
    bool ignore_half_close = false;
    // Wait this long before sending the response headers (an attempt still under way).
    milliseconds header_delay{0};
  };

  explicit FakeProxyServer(Config config, int port = 0) : config_(std::move(config)) {
    const auto& d = cert_dir();
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:" + std::to_string(port),
                       konn::testclient::grpc_server_credentials(d + "/server.crt",
                                                                 d + "/server.key", d + "/ca.crt"),
                       &port_);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    REQUIRE(server_ != nullptr);
  }
  ~FakeProxyServer() override { shutdown(); }

  void shutdown() {
    if (!server_) return;
    {
      std::lock_guard lock(mu_);
      for (auto& s : sessions_) s->kill();
    }
    server_->Shutdown(std::chrono::system_clock::now() + seconds(2));
    server_->Wait();
    server_.reset();
  }

  int port() const { return port_; }

  std::shared_ptr<Session> session(size_t index, milliseconds limit = kWait) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, limit, [&] { return sessions_.size() > index; });
    return sessions_.size() > index ? sessions_[index] : nullptr;
  }
  // Connect calls received, counted before their headers go out.
  int calls() const { return calls_.load(); }
  size_t session_count() {
    std::lock_guard lock(mu_);
    return sessions_.size();
  }

  grpc::Status Connect(grpc::ServerContext* ctx,
                       grpc::ServerReaderWriter<Packet, Packet>* stream) override {
    auto s = std::make_shared<Session>();
    s->ctx = ctx;
    s->stream = stream;
    auto authority = ctx->ExperimentalGetAuthority();
    s->authority.assign(authority.data(), authority.size());
    for (const auto& [k, v] : ctx->client_metadata()) {
      s->request_headers.emplace(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
    }
    {
      std::lock_guard lock(mu_);
      size_t i = std::min(sessions_.size(), config_.server_ids.size() - 1);
      s->server_id = config_.server_ids[i];
    }
    ctx->AddInitialMetadata("serverid", s->server_id);
    if (config_.send_server_count) {
      ctx->AddInitialMetadata("servercount", std::to_string(config_.server_count));
    }
    if (config_.flow_control) ctx->AddInitialMetadata("konn-flow-control", "1");
    calls_.fetch_add(1);
    if (config_.header_delay.count() > 0) std::this_thread::sleep_for(config_.header_delay);
    stream->SendInitialMetadata();
    {
      std::lock_guard lock(mu_);
      sessions_.push_back(s);
    }
    cv_.notify_all();
    Packet p;
    while (stream->Read(&p)) {
      {
        std::lock_guard lock(s->mu);
        s->received.push_back(std::move(p));
      }
      s->cv.notify_all();
      p = Packet();
    }
    if (config_.ignore_half_close) {
      while (!ctx->IsCancelled()) std::this_thread::sleep_for(milliseconds(10));
    }
    {
      std::lock_guard lock(s->write_mu);
      s->alive = false;
    }
    {
      std::lock_guard lock(s->mu);
      s->ended = true;
    }
    s->cv.notify_all();
    return grpc::Status::OK;
  }

 private:
  Config config_;
  std::atomic<int> calls_{0};
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Session>> sessions_;
};

// Loopback endpoint: echoes (or, with `send_bytes`, first sends that many bytes and then reads
// until EOF). Counts accepted and finished connections.
class Endpoint {
 public:
  // A destination that accepts and never reads: its socket buffers fill, then the agent's queue.
  struct NeverReads {};

  explicit Endpoint(NeverReads) : Endpoint() { never_read_ = true; }
  explicit Endpoint(size_t send_bytes = 0, bool close_after_send = false)
      : send_bytes_(send_bytes),
        close_after_send_(close_after_send),
        acceptor_(konn::core::net::listen_tcp(ctx_, "127.0.0.1", 0)) {
    asio::co_spawn(ctx_, accept_loop(), asio::detached);
    thread_ = std::thread([this] { ctx_.run(); });
  }
  ~Endpoint() {
    ctx_.stop();
    thread_.join();
  }
  std::string address() const {
    return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  std::atomic<int> accepted{0};
  std::atomic<int> finished{0};  // the agent side closed

  static std::string payload(size_t n) {
    std::string p(n, '\0');
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>(i * 7);
    return p;
  }

 private:
  konn::core::io::Awaitable<void> accept_loop() {
    while (true) {
      auto [ec, sock] = co_await acceptor_.async_accept(konn::core::io::use_nothrow);
      if (ec) co_return;
      ++accepted;
      asio::co_spawn(ctx_, serve(std::move(sock)), asio::detached);
    }
  }
  konn::core::io::Awaitable<void> serve(asio::ip::tcp::socket sock) {
    if (never_read_) {
      asio::steady_timer forever(ctx_, asio::steady_timer::time_point::max());
      co_await forever.async_wait(konn::core::io::use_nothrow);
      co_return;
    }
    if (send_bytes_ > 0) {
      std::string data = payload(send_bytes_);
      co_await asio::async_write(sock, asio::buffer(data), konn::core::io::use_nothrow);
      if (close_after_send_) {
        ++finished;
        co_return;  // the socket closes with the frame
      }
    }
    std::vector<char> buf(64 * 1024);
    while (true) {
      auto [ec, n] = co_await sock.async_read_some(asio::buffer(buf), konn::core::io::use_nothrow);
      if (ec) break;
      if (send_bytes_ == 0) {
        auto [wec, wn] = co_await asio::async_write(sock, asio::buffer(buf.data(), n),
                                                    konn::core::io::use_nothrow);
        if (wec) break;
      }
    }
    ++finished;
  }

  size_t send_bytes_;
  bool close_after_send_;
  bool never_read_ = false;
  asio::io_context ctx_{1};
  asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
};

AgentOptions agent_options(int port) {
  AgentOptions o;
  const auto& d = cert_dir();
  o.proxy_server_port = port;
  o.ca_cert = d + "/ca.crt";
  o.agent_cert = d + "/agent.crt";
  o.agent_key = d + "/agent.key";
  o.agent_id = "agent-under-test";
  o.agent_identifiers = "host=node1&default-route=true";
  o.sync_interval = milliseconds(50);
  o.sync_interval_cap = milliseconds(300);
  o.probe_interval = milliseconds(100);
  o.dial_timeout = seconds(5);
  o.health_server_host = "127.0.0.1";
  o.health_server_port = 0;
  o.admin_server_port = 0;
  return o;
}

// One HTTP/1.0 GET on loopback; returns the whole response (status line, headers, body).
std::string http_get(uint16_t port, const std::string& path) {
  asio::io_context ctx;
  asio::ip::tcp::socket s(ctx);
  s.connect({asio::ip::make_address("127.0.0.1"), port});
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  asio::write(s, asio::buffer(req));
  std::string out;
  std::error_code ec;
  char buf[4096];
  while (true) {
    size_t n = s.read_some(asio::buffer(buf), ec);
    if (ec) break;
    out.append(buf, n);
  }
  return out;
}

Packet dial(const std::string& address, int64_t random, const std::string& protocol = "tcp") {
  return tunnel::make_dial_request(address, random, protocol);
}

// A port nobody listens on: one taken from the kernel and released.
std::string closed_port_address() {
  asio::io_context ctx;
  auto a = konn::core::net::listen_tcp(ctx, "127.0.0.1", 0);
  return "127.0.0.1:" + std::to_string(a.local_endpoint().port());
}

// A listener whose accept queue is full: a connect to it hangs in SYN_SENT (the SYN is dropped).
struct HangingListener {
  asio::io_context ctx;
  asio::ip::tcp::acceptor acceptor{ctx};
  asio::ip::tcp::socket filler{ctx};  // backlog 0 holds exactly one; the next SYN is dropped
  HangingListener() {
    acceptor.open(asio::ip::tcp::v4());
    acceptor.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor.listen(0);
    filler.connect(acceptor.local_endpoint());
  }
  std::string address() const {
    return "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
  }
};

// Dials through the agent and returns the connectID.
int64_t dial_ok(Session& s, const std::string& address, int64_t random) {
  REQUIRE(s.write(dial(address, random)));
  auto rsp = s.take_type(DIAL_RSP);
  REQUIRE(rsp);
  REQUIRE(rsp->dialresponse().error().empty());
  CHECK(rsp->dialresponse().random() == random);
  return rsp->dialresponse().connectid();
}

std::string pattern(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + static_cast<char>(i % 251));
  return s;
}

}  // namespace

// reliability: proxy-agent | DATA or CLOSE_REQ for an unknown connectID | CLOSE_RSP "unrecognized
// reliability+: connectID" or "Unknown connectID" | debug "DATA for unknown connectID ..." or
// reliability+: "CLOSE_REQ for unknown connectID ..." | the other tunnels
TEST_CASE("agent sends its identity headers and serves dial, data, close", "[agent][stream]") {
  FakeProxyServer server({});
  Endpoint echo;
  auto opts = agent_options(server.port());
  std::string token_path = cert_dir() + "/token";
  std::ofstream(token_path) << "secret-token\n";
  opts.service_account_token_path = token_path;
  AgentApp app(opts);
  app.start();

  auto s = server.session(0);
  REQUIRE(s);
  CHECK(s->header("agentid") == "agent-under-test");
  CHECK(s->header("agentidentifiers") == "host=node1&default-route=true");
  CHECK(s->header("authorization") == "Bearer secret-token");  // trailing newline trimmed
  CHECK(s->header("konn-flow-control") == "1");
  CHECK(s->header_count("agentid") == 1);
  REQUIRE(eventually([&] { return app.servers().connected() == 1; }));

  int64_t c1 = dial_ok(*s, echo.address(), 42);
  CHECK(c1 == 1);
  int64_t c2 = dial_ok(*s, echo.address(), 43);
  CHECK(c2 == 2);

  REQUIRE(s->write(tunnel::make_data(c1, "hello")));
  REQUIRE(s->write(tunnel::make_data(c2, "world")));
  CHECK(s->take_data(c1, 5) == "hello");
  CHECK(s->take_data(c2, 5) == "world");

  // Unknown ids get upstream's exact answers.
  REQUIRE(s->write(tunnel::make_data(99, "x")));
  auto unknown_data = s->take_type(CLOSE_RSP);
  REQUIRE(unknown_data);
  CHECK(unknown_data->closeresponse().connectid() == 99);
  CHECK(unknown_data->closeresponse().error() == "unrecognized connectID");
  REQUIRE(s->write(tunnel::make_close_request(98)));
  auto unknown_close = s->take_type(CLOSE_RSP);
  REQUIRE(unknown_close);
  CHECK(unknown_close->closeresponse().connectid() == 98);
  CHECK(unknown_close->closeresponse().error() == "Unknown connectID");

  // CLOSE_REQ closes the endpoint socket and is answered.
  REQUIRE(s->write(tunnel::make_close_request(c1)));
  auto closed = s->take_type(CLOSE_RSP);
  REQUIRE(closed);
  CHECK(closed->closeresponse().connectid() == c1);
  CHECK(closed->closeresponse().error().empty());
  REQUIRE(eventually([&] { return echo.finished == 1; }));
  // The other connection is untouched.
  REQUIRE(s->write(tunnel::make_data(c2, "still here")));
  CHECK(s->take_data(c2, 10) == "still here");
  app.stop();
}

TEST_CASE("endpoint EOF becomes CLOSE_RSP after the data", "[agent][stream]") {
  FakeProxyServer server({});
  const size_t n = 300 * 1024;
  Endpoint source(n, /*close_after_send=*/true);
  AgentApp app(agent_options(server.port()));
  app.start();
  auto s = server.session(0);
  REQUIRE(s);
  int64_t c = dial_ok(*s, source.address(), 7);
  auto rsp = s->take_type(CLOSE_RSP);
  REQUIRE(rsp);
  CHECK(rsp->closeresponse().connectid() == c);
  CHECK(rsp->closeresponse().error().empty());
  // Every DATA arrived before the CLOSE_RSP: all of it is queued already.
  CHECK(s->queued_data(c) == n);
  CHECK(s->take_data(c, n) == Endpoint::payload(n));
  REQUIRE(eventually([&] { return app.servers().endpoint_connections() == 0; }));
  app.stop();
}

TEST_CASE("an ordinary tunnel end is logged at debug, a failure at info", "[agent][stream]") {
  // One info line per tunnel was a write(2) per dial and a busy agent's whole log; the server
  // logs its tunnels' ends at debug too. What went wrong still shows at the default level.
  konn::testsupport::LogCapture captured("agent.endpoint");
  auto closed_line = [&](const std::string& reason) {
    return captured.level_of("closed: " + reason);
  };
  FakeProxyServer server({});
  Endpoint echo;
  AgentApp app(agent_options(server.port()));
  app.start();
  auto s = server.session(0);
  REQUIRE(s);
  int64_t c = dial_ok(*s, echo.address(), 11);
  REQUIRE(s->write(tunnel::make_close_request(c)));
  REQUIRE(s->take_type(CLOSE_RSP));
  REQUIRE(eventually([&] { return closed_line("CLOSE_REQ from server").has_value(); }));
  CHECK(closed_line("CLOSE_REQ from server") == spdlog::level::debug);

  const std::string closed_address = closed_port_address();
  REQUIRE(s->write(dial(closed_address, 12)));
  REQUIRE(s->take_type(DIAL_RSP));
  REQUIRE(eventually([&] { return closed_line("dial failed").has_value(); }));
  CHECK(closed_line("dial failed") == spdlog::level::info);
  app.stop();
}

// reliability: proxy-agent | DIAL_REQ to a closed port | DIAL_RSP "dial tcp ...: connect:
// reliability+: connection refused" | info "closed: dial failed: ..." | the stream
// reliability: proxy-agent | DIAL_REQ with protocol udp, or without payload (protocol empty) |
// reliability+: DIAL_RSP error "... unknown network udp" | warn "[D6] dial refused: protocol "udp"
// reliability+: ... (only tcp is dialled)" | the stream
// reliability: proxy-agent | DATA without payload | CLOSE_RSP for connectID 0 | debug "DATA for
// reliability+: unknown connectID 0" | the stream
TEST_CASE("dial failures and refused protocols answer DIAL_RSP errors", "[agent][stream]") {
  FakeProxyServer server({});
  AgentApp app(agent_options(server.port()));
  app.start();
  auto s = server.session(0);
  REQUIRE(s);

  const std::string closed_address = closed_port_address();
  REQUIRE(s->write(dial(closed_address, 5)));
  auto rsp = s->take_type(DIAL_RSP);
  REQUIRE(rsp);
  CHECK(rsp->dialresponse().random() == 5);
  CHECK(rsp->dialresponse().connectid() == 0);
  CHECK(rsp->dialresponse().error() ==
        "dial tcp " + closed_address + ": connect: connection refused");

  REQUIRE(s->write(dial("127.0.0.1:53", 6, "udp")));
  auto udp = s->take_type(DIAL_RSP);
  REQUIRE(udp);
  CHECK(udp->dialresponse().random() == 6);
  CHECK(udp->dialresponse().error().find("unknown network udp") != std::string::npos);

  // A packet without payload must not crash anything (proto3 zero values).
  Packet empty;
  empty.set_type(DATA);
  REQUIRE(s->write(empty));
  auto zero = s->take_type(CLOSE_RSP);
  REQUIRE(zero);
  CHECK(zero->closeresponse().connectid() == 0);
  Packet bare_dial;  // type 0 = DIAL_REQ, no payload: protocol "" is refused
  REQUIRE(s->write(bare_dial));
  auto bare = s->take_type(DIAL_RSP);
  REQUIRE(bare);
  CHECK_FALSE(bare->dialresponse().error().empty());
  app.stop();
}

TEST_CASE("no window updates unless the server announced flow control", "[agent][stream]") {
  FakeProxyServer server({});
  Endpoint echo;
  AgentApp app(agent_options(server.port()));
  app.start();
  auto s = server.session(0);
  REQUIRE(s);
  int64_t c = dial_ok(*s, echo.address(), 1);
  const size_t total = 3 * 1024 * 1024;  // above kWindowUpdateThreshold
  std::string data = pattern(total, 'a');
  for (size_t off = 0; off < total; off += 256 * 1024) {
    REQUIRE(s->write(tunnel::make_data(c, data.substr(off, 256 * 1024))));
  }
  CHECK(s->take_data(c, total) == data);
  CHECK_FALSE(s->has_type(KONN_WINDOW_UPDATE));
  CHECK(app.stats().window_updates_sent == 0);
  app.stop();
}

TEST_CASE("with flow control the agent returns credit and honours its window",
          "[agent][stream]") {
  FakeProxyServer::Config cfg;
  cfg.flow_control = true;
  FakeProxyServer server(cfg);
  const size_t sent_by_endpoint = 12 * 1024 * 1024;
  Endpoint source(sent_by_endpoint);
  Endpoint echo;
  AgentApp app(agent_options(server.port()));
  app.start();
  auto s = server.session(0);
  REQUIRE(s);

  // Server -> endpoint: credit comes back once kWindowUpdateThreshold bytes were written.
  int64_t e = dial_ok(*s, echo.address(), 1);
  std::string data = pattern(3 * 1024 * 1024, 'k');
  for (size_t off = 0; off < data.size(); off += 256 * 1024) {
    REQUIRE(s->write(tunnel::make_data(e, data.substr(off, 256 * 1024))));
  }
  auto wu = s->take_type(KONN_WINDOW_UPDATE);
  REQUIRE(wu);
  CHECK(wu->windowupdate().connectid() == e);
  CHECK(wu->windowupdate().bytes() >= tunnel::kWindowUpdateThreshold);
  CHECK(s->take_data(e, data.size()) == data);

  // Endpoint -> server: the agent stops at the window until credit arrives.
  int64_t c = dial_ok(*s, source.address(), 2);
  std::string first = s->take_data(c, tunnel::kTunnelWindow);
  CHECK(first.size() == static_cast<size_t>(tunnel::kTunnelWindow));
  REQUIRE(eventually([&] { return app.stats().read_pauses >= 1; }));
  CHECK_FALSE(s->take([c](const Packet& p) { return p.type() == DATA && p.data().connectid() == c; },
                      milliseconds(300)));
  REQUIRE(s->write(tunnel::make_window_update(c, tunnel::kTunnelWindow)));
  std::string rest = s->take_data(c, sent_by_endpoint - first.size());
  CHECK(first.size() + rest.size() == sent_by_endpoint);
  app.stop();
}

// reliability: proxy-agent | DIAL_CLS for a dial hanging in SYN_SENT | dial abandoned, no DIAL_RSP
// reliability+: | info "closed: dial cancelled (DIAL_CLS)" | the stream; a later dial works
TEST_CASE("DIAL_CLS cancels a dial in progress, or closes what it produced", "[agent][stream]") {
  FakeProxyServer server({});
  Endpoint echo;
  auto opts = agent_options(server.port());
  opts.dial_timeout = seconds(20);  // only the cancel can end the hanging dial in time
  AgentApp app(opts);
  app.start();
  auto s = server.session(0);
  REQUIRE(s);

  HangingListener hanging;
  REQUIRE(s->write(dial(hanging.address(), 900)));
  REQUIRE(eventually([&] { return app.stats().dials >= 1; }));
  REQUIRE(s->write(tunnel::make_close_dial(900)));
  REQUIRE(eventually([&] { return app.stats().dials_cancelled == 1; }, milliseconds(5000)));
  CHECK_FALSE(s->take_type(DIAL_RSP, milliseconds(200)));
  CHECK(app.servers().endpoint_connections() == 0);

  // After DIAL_RSP, DIAL_CLS closes the connection and says so.
  int64_t c = dial_ok(*s, echo.address(), 901);
  REQUIRE(s->write(tunnel::make_close_dial(901)));
  auto rsp = s->take_type(CLOSE_RSP);
  REQUIRE(rsp);
  CHECK(rsp->closeresponse().connectid() == c);
  REQUIRE(eventually([&] { return echo.finished == 1; }));
  app.stop();
}

// reliability: proxy-agent | a dial that hangs in SYN_SENT past --dial-timeout | DIAL_RSP error
// reliability+: "dial tcp <address>: i/o timeout" | info "closed: dial failed: ..." | the stream;
// reliability+: a later dial works
TEST_CASE("a dial that outlives --dial-timeout answers an i/o timeout", "[agent][stream]") {
  FakeProxyServer server({});
  Endpoint echo;
  auto opts = agent_options(server.port());
  opts.dial_timeout = milliseconds(300);
  AgentApp app(opts);
  app.start();
  auto s = server.session(0);
  REQUIRE(s);

  HangingListener hanging;
  const std::string hang_address = hanging.address();
  auto started = std::chrono::steady_clock::now();
  REQUIRE(s->write(dial(hang_address, 950)));
  auto rsp = s->take_type(DIAL_RSP, milliseconds(5000));
  REQUIRE(rsp);
  CHECK(std::chrono::steady_clock::now() - started >= milliseconds(300));
  CHECK(rsp->dialresponse().random() == 950);
  CHECK(rsp->dialresponse().connectid() == 0);
  CHECK(rsp->dialresponse().error() == "dial tcp " + hang_address + ": i/o timeout");
  CHECK(app.stats().dial_timeouts == 1);
  REQUIRE(eventually([&] { return app.servers().endpoint_connections() == 0; }));

  // A name is looked up, then dialled the same way.
  dial_ok(*s, "localhost:" + echo.address().substr(echo.address().rfind(':') + 1), 951);
  REQUIRE(eventually([&] { return echo.accepted == 1; }));
  app.stop();
}

TEST_CASE("one stream per server id until servercount is reached", "[agent][set]") {
  FakeProxyServer::Config cfg;
  cfg.server_ids = {"s1", "s1", "s2"};
  cfg.server_count = 2;
  FakeProxyServer server(cfg);
  AgentApp app(agent_options(server.port()));
  app.start();
  REQUIRE(eventually([&] { return app.servers().connected() == 2; }));
  auto ids = app.servers().server_ids();
  CHECK(ids == std::vector<std::string>{"s1", "s2"});
  CHECK(app.servers().server_count() == 2);
  CHECK(app.stats().duplicate_servers == 1);
  auto dup = server.session(1);
  REQUIRE(dup);
  CHECK(dup->server_id == "s1");
  CHECK(dup->wait_ended());  // the duplicate was dropped
  // A session is registered just after its headers went out, so it may trail the agent a bit.
  REQUIRE(eventually([&] { return server.session_count() == 3; }));
  // Connected to servercount servers: no more attempts (six sync intervals pass without one).
  CHECK(server.session(3, milliseconds(300)) == nullptr);
  app.stop();
}

// reliability: proxy-agent | server stream without a servercount header | stream dropped, retried |
// reliability+: warn "cannot connect to proxy-server ...: expected one servercount header, got 0" |
// reliability+: agent, retrying
TEST_CASE("a stream without servercount is dropped and retried", "[agent][set]") {
  FakeProxyServer::Config cfg;
  cfg.send_server_count = false;
  FakeProxyServer server(cfg);
  AgentApp app(agent_options(server.port()));
  app.start();
  REQUIRE(server.session(2));  // keeps retrying
  CHECK(server.session(0)->wait_ended());
  CHECK(app.servers().connected() == 0);
  CHECK(app.stats().server_connect_failures >= 2);
  app.stop();
}

// reliability: proxy-agent | server stream killed with a tunnel open | endpoint connection closed,
// reliability+: reconnects | info "disconnected (...); closed 1 endpoint connection(s)" | agent;
// reliability+: dials on the new stream
TEST_CASE("a lost server stream closes its tunnels and the agent reconnects", "[agent][set]") {
  FakeProxyServer server({});
  Endpoint echo;
  AgentApp app(agent_options(server.port()));
  app.start();
  auto s = server.session(0);
  REQUIRE(s);
  dial_ok(*s, echo.address(), 11);
  REQUIRE(eventually([&] { return echo.accepted == 1; }));
  s->kill();
  REQUIRE(eventually([&] { return echo.finished == 1; }));  // tunnel torn down
  auto again = server.session(1);
  REQUIRE(again);
  REQUIRE(eventually([&] { return app.servers().connected() == 1; }));
  int64_t c = dial_ok(*again, echo.address(), 12);
  CHECK(c == 1);  // connectIDs are per stream
  app.stop();
}

// reliability: proxy-agent | a packet it cannot parse (DIAL_REQ address not UTF-8) from a server
// reliability+: that ignores the agent's half-close | stream reset at once | warn "a message from
// reliability+: the server is not a Packet (N bytes); ending the stream" | agent; reconnects and
// reliability+: dials on the new stream
TEST_CASE("a packet the agent cannot parse resets the stream and the agent reconnects",
          "[agent][set]") {
  FakeProxyServer::Config config;
  config.ignore_half_close = true;
  FakeProxyServer server(config);
  Endpoint echo;
  AgentApp app(agent_options(server.port()));
  app.start();
  auto s = server.session(0);
  REQUIRE(s);
  REQUIRE(eventually([&] { return app.servers().connected() == 1; }));
  // proto3 refuses a string that is not UTF-8: the agent's read fails on this packet.
  REQUIRE(s->write(dial("\xff\xfe:80", 7)));
  // The agent resets the call at once: this server would never end it after a half-close.
  REQUIRE(s->wait_ended(seconds(2)));
  // A broken stream, not a clean end. Counted in OnDone, which may come after the server saw the
  // cancellation.
  CHECK(eventually([&] { return app.stats().server_recv_failures >= 1; }));
  auto again = server.session(1);
  REQUIRE(again);
  REQUIRE(eventually([&] { return app.servers().connected() == 1; }));
  CHECK(dial_ok(*again, echo.address(), 21) == 1);
  app.stop();
}

TEST_CASE("the agent comes back after a server restart", "[agent][set]") {
  auto server = std::make_unique<FakeProxyServer>(FakeProxyServer::Config{});
  int port = server->port();
  AgentApp app(agent_options(port));
  app.start();
  REQUIRE(server->session(0));
  REQUIRE(eventually([&] { return app.servers().connected() == 1; }));
  server->shutdown();
  REQUIRE(eventually([&] { return app.servers().connected() == 0; }));
  server = std::make_unique<FakeProxyServer>(FakeProxyServer::Config{}, port);
  // sync-interval-cap is 300 ms: well within the wait.
  REQUIRE(server->session(0, milliseconds(3000)));
  REQUIRE(eventually([&] { return app.servers().connected() == 1; }, milliseconds(3000)));
  app.stop();
}

// reliability: proxy-agent | stopped while an attempt waits for a server that accepted TCP and
// reliability+: says nothing | the attempt is dropped at once, stop() returns | none | agent exits
TEST_CASE("stopping while a connection attempt hangs in the TLS handshake returns at once",
          "[agent][set]") {
  // Accepts and never answers: the attempt waits in its TLS handshake for
  // --server-connect-timeout (20 s here).
  asio::io_context io;
  asio::ip::tcp::acceptor silent(io, {asio::ip::make_address("127.0.0.1"), 0});
  auto options = agent_options(silent.local_endpoint().port());
  options.server_connect_timeout = seconds(20);
  for (bool graceful : {false, true}) {
    INFO("graceful " << graceful);
    AgentApp app(options);
    app.start();
    asio::ip::tcp::socket held(io);
    silent.accept(held);  // the attempt is under way
    auto before = std::chrono::steady_clock::now();
    app.stop(graceful);
    CHECK(std::chrono::steady_clock::now() - before < seconds(1));
    CHECK(app.servers().connected() == 0);
  }
}

TEST_CASE("drain sends DRAIN, keeps its tunnels and still serves dials", "[agent][set]") {
  FakeProxyServer server({});
  Endpoint echo;
  AgentApp app(agent_options(server.port()));
  app.start();
  auto s = server.session(0);
  REQUIRE(s);
  REQUIRE(eventually([&] { return app.servers().connected() == 1; }));
  int64_t c = dial_ok(*s, echo.address(), 3);
  app.drain();
  auto drain = s->take_type(DRAIN);
  REQUIRE(drain);
  // Existing tunnels keep working while draining.
  REQUIRE(s->write(tunnel::make_data(c, "after drain")));
  CHECK(s->take_data(c, 11) == "after drain");
  REQUIRE(s->write(tunnel::make_close_request(c)));
  REQUIRE(s->take_type(CLOSE_RSP));
  REQUIRE(eventually([&] { return app.servers().endpoint_connections() == 0; }));
  // A server whose agents all drain still sends dials to a draining one: they are served, and
  // the stream stays up with no tunnel left.
  int64_t late = dial_ok(*s, echo.address(), 4);
  REQUIRE(s->write(tunnel::make_data(late, "fallback")));
  CHECK(s->take_data(late, 8) == "fallback");
  REQUIRE(s->write(tunnel::make_close_request(late)));
  REQUIRE(s->take_type(CLOSE_RSP));
  REQUIRE(eventually([&] { return app.servers().endpoint_connections() == 0; }));
  CHECK(app.servers().connected() == 1);
  app.stop(true);
  CHECK(s->wait_ended());  // graceful: the agent half-closed and the server finished
}

TEST_CASE("a stream whose handshake ends after the drain began is kept and told DRAIN",
          "[agent][set]") {
  FakeProxyServer::Config config;
  config.header_delay = milliseconds(300);
  FakeProxyServer server(config);
  Endpoint echo;
  AgentApp app(agent_options(server.port()));
  app.start();
  REQUIRE(eventually([&] { return server.calls() == 1; }));
  app.drain();  // the server has the call; its headers are still to come
  auto s = server.session(0);
  REQUIRE(s);
  REQUIRE(s->take_type(DRAIN));
  REQUIRE(eventually([&] { return app.servers().connected() == 1; }));
  // Kept: a server whose agents all drain still gets its dials served.
  int64_t c = dial_ok(*s, echo.address(), 7);
  REQUIRE(s->write(tunnel::make_data(c, "late")));
  CHECK(s->take_data(c, 4) == "late");
  CHECK(server.session_count() == 1);  // and no new server connection while draining
  app.stop(true);
}

TEST_CASE("a graceful stop ends a stream whose server keeps sending", "[agent][set]") {
  FakeProxyServer server({});
  AgentApp app(agent_options(server.port()));
  app.start();
  auto s = server.session(0);
  REQUIRE(s);
  REQUIRE(eventually([&] { return app.servers().connected() == 1; }));
  // Packets keep coming while the agent closes: once it stops reading, one is held and the
  // stream paused, and the server's end must not wait behind that pause.
  std::atomic<bool> stopped{false};
  std::thread chatter([&] {
    for (int64_t i = 1; !stopped; ++i) {
      if (!s->write(tunnel::make_close_dial(i))) break;  // unknown dials: ignored
    }
  });
  std::this_thread::sleep_for(milliseconds(50));
  auto t0 = std::chrono::steady_clock::now();
  app.stop(true);
  auto took = std::chrono::steady_clock::now() - t0;
  stopped = true;
  chatter.join();
  CHECK(took < seconds(2));
  CHECK(s->wait_ended());
}

TEST_CASE("readiness follows the server connection, metrics keep upstream names", "[agent][admin]") {
  auto server = std::make_unique<FakeProxyServer>(FakeProxyServer::Config{});
  Endpoint echo;
  AgentApp app(agent_options(server->port()));
  app.start();
  REQUIRE(app.health_port() != 0);
  REQUIRE(app.admin_port() != 0);
  CHECK(http_get(app.health_port(), "/healthz").find("200") != std::string::npos);
  auto s = server->session(0);
  REQUIRE(s);
  REQUIRE(eventually([&] { return app.servers().connected() == 1; }));
  auto ready = http_get(app.health_port(), "/readyz");
  CHECK(ready.rfind("HTTP/1.1 200", 0) == 0);
  int64_t c = dial_ok(*s, echo.address(), 4);
  REQUIRE(s->write(tunnel::make_data(c, "ping")));
  CHECK(s->take_data(c, 4) == "ping");
  auto metrics = http_get(app.admin_port(), "/metrics");
  CHECK(metrics.find("konnectivity_network_proxy_agent_open_server_connections 1") !=
        std::string::npos);
  CHECK(metrics.find("konnectivity_network_proxy_agent_open_endpoint_connections 1") !=
        std::string::npos);
  CHECK(metrics.find("konnectivity_network_proxy_agent_known_server_count 1") != std::string::npos);
  // Counted once the write returned, which may be after the echo came back: wait for it.
  CHECK(eventually([&] {
    return http_get(app.admin_port(), "/metrics")
               .find("konn_agent_bytes_total{direction=\"to_endpoint\"} 4") != std::string::npos;
  }));

  server->shutdown();
  REQUIRE(eventually([&] { return app.servers().connected() == 0; }));
  auto not_ready = http_get(app.health_port(), "/readyz");
  CHECK(not_ready.rfind("HTTP/1.1 503", 0) == 0);
  CHECK(not_ready.find("[-]server-connected failed: no servers connected") != std::string::npos);
  app.stop();
}

// reliability: proxy-agent | endpoint that never reads, server without flow control | CLOSE_RSP
// reliability+: "konn agent: endpoint write queue over ..." | info "closed: write queue over its
// reliability+: cap ..." | the other tunnel on the stream
TEST_CASE("without flow control a stuck endpoint is closed alone at its cap", "[agent][stream]") {
  FakeProxyServer server({});  // no konn-flow-control: an upstream-like server
  Endpoint stuck{Endpoint::NeverReads{}};
  Endpoint echo;
  AgentApp app(agent_options(server.port()));
  app.start();
  auto s = server.session(0);
  REQUIRE(s);
  int64_t slow = dial_ok(*s, stuck.address(), 21);
  int64_t fast = dial_ok(*s, echo.address(), 22);
  // Far more than the 16 MiB cap plus what loopback socket buffers absorb.
  std::string chunk(1024 * 1024, 'z');
  std::optional<Packet> rsp;
  for (int i = 0; i < 96 && !rsp; ++i) {
    REQUIRE(s->write(tunnel::make_data(slow, std::string(chunk))));
    // The other tunnel on the same stream keeps flowing meanwhile.
    if (i % 16 == 0) {
      REQUIRE(s->write(tunnel::make_data(fast, "tick")));
      CHECK(s->take_data(fast, 4) == "tick");
    }
    rsp = s->take([slow](const Packet& p) {
      return p.type() == CLOSE_RSP && p.closeresponse().connectid() == slow;
    }, milliseconds(0));
  }
  if (!rsp) {
    rsp = s->take([slow](const Packet& p) {
      return p.type() == CLOSE_RSP && p.closeresponse().connectid() == slow;
    });
  }
  REQUIRE(rsp);
  CHECK(rsp->closeresponse().error().find("write queue") != std::string::npos);
  CHECK(app.stats().queue_overflow_closes == 1);
  REQUIRE(s->write(tunnel::make_data(fast, "still flowing")));
  CHECK(s->take_data(fast, 13) == "still flowing");
  app.stop();
}

TEST_CASE("sync-forever keeps dialing and drops duplicates", "[agent][set]") {
  FakeProxyServer server({});  // always server-1, servercount 1
  auto opts = agent_options(server.port());
  opts.sync_forever = true;
  AgentApp app(opts);
  app.start();
  REQUIRE(server.session(3));
  CHECK(app.servers().connected() == 1);
  REQUIRE(eventually([&] { return app.stats().duplicate_servers >= 2; }));
  app.stop();
}

TEST_CASE("several --proxy-server-host values are dialled in turn", "[agent][set]") {
  FakeProxyServer::Config cfg;
  cfg.server_ids = {"s1", "s2"};
  cfg.server_count = 2;
  FakeProxyServer server(cfg);
  auto opts = agent_options(server.port());
  opts.proxy_server_hosts = {"127.0.0.1", "localhost"};  // the test certificate names both
  AgentApp app(opts);
  app.start();
  REQUIRE(eventually([&] { return app.servers().connected() == 2; }));
  auto port = std::to_string(server.port());
  CHECK(server.session(0)->authority == "127.0.0.1:" + port);
  CHECK(server.session(1)->authority == "localhost:" + port);
  app.stop();
}
