// The fleet simulator's protocol handling (issue 42), against a core/h2 server that plays the
// proxy-server's side of AgentService/Connect over TLS: the metadata upstream's agent sends,
// DIAL_REQ -> DIAL_RSP, DATA echoed, CLOSE_REQ -> CLOSE_RSP, DRAIN, a real dial, and the
// reconnect backoff.

#include "bench/fleet/fleet_sim.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <catch2/catch.hpp>

#include "core/h2/h2_test_peer.h"
#include "core/tunnel/packet.h"
#include "konnectivity/client.pb.h"
#include "tests/support/echo_server.h"
#include "tests/support/test_certs.h"

namespace {

namespace h2 = konn::core::h2;
namespace fleet = konn::bench::fleet;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// The server's side: each Connect call is recorded, and the packets of the latest one queued.
struct FakeServer {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<h2::Metadata> calls;
  std::vector<Clock::time_point> call_times;
  std::shared_ptr<h2::Stream> stream;  // the latest call (use on the loop)
  std::deque<Packet> packets;
  std::unique_ptr<h2::testing::H2Server> server;

  FakeServer() {
    server = std::make_unique<h2::testing::H2Server>(
        h2::testing::Kind::Tls,
        [this](const std::shared_ptr<h2::Stream>& s, const h2::CallInfo& info) {
          REQUIRE(info.path == "/AgentService/Connect");
          h2::StreamCallbacks cb;
          cb.on_message = [this](std::string&& m) {
            Packet p;
            REQUIRE(p.ParseFromString(m));
            std::lock_guard lock(mu);
            packets.push_back(std::move(p));
            cv.notify_all();
          };
          s->set_callbacks(std::move(cb));
          s->send_headers({{"serverid", "fake"}, {"servercount", "1"}});
          std::lock_guard lock(mu);
          calls.push_back(info.metadata);
          call_times.push_back(Clock::now());
          stream = s;
          cv.notify_all();
        });
  }
  bool wait_calls(size_t n, milliseconds t = milliseconds(5000)) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, t, [&] { return calls.size() >= n; });
  }
  std::optional<Packet> next_packet(milliseconds t = milliseconds(5000)) {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, t, [&] { return !packets.empty(); })) return std::nullopt;
    Packet p = std::move(packets.front());
    packets.pop_front();
    return p;
  }
  void send(const Packet& p) {
    const std::string bytes = p.SerializeAsString();
    server->loop().run([&] {
      std::lock_guard lock(mu);
      REQUIRE(stream);
      stream->send_message(bytes);
      return 0;
    });
  }
  void end_call() {
    server->loop().run([&] {
      std::shared_ptr<h2::Stream> s;
      {
        std::lock_guard lock(mu);
        s = stream;
      }
      s->abort(h2::GrpcStatus{h2::grpc_code::kUnavailable, "server going away"});
      return 0;
    });
  }
};

// The simulator's side: agents on their own io thread.
struct AgentLoop {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread{[this] { io.run(); }};
  ~AgentLoop() {
    work.reset();
    io.stop();
    thread.join();
  }
  template <typename F>
  void run(F f) {
    std::promise<void> done;
    asio::post(io, [&] {
      f();
      done.set_value();
    });
    done.get_future().get();
  }
};

fleet::AgentConfig tls_config(uint16_t port) {
  const auto& certs = konn::testsupport::test_certs();
  fleet::AgentConfig cfg;
  cfg.server_port = port;
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  ctx->load_verify_file(certs.ca_crt);
  ctx->set_verify_mode(asio::ssl::verify_peer);
  ctx->use_certificate_chain_file(certs.agent_crt);
  ctx->use_private_key_file(certs.agent_key, asio::ssl::context::pem);
  cfg.tls = ctx;
  cfg.backoff_initial = milliseconds(100);
  cfg.backoff_cap = milliseconds(400);
  return cfg;
}

Packet dial_req(int64_t random, const std::string& address) {
  return konn::core::tunnel::make_dial_request(address, random);
}

Packet data(int64_t cid, const std::string& bytes) {
  return konn::core::tunnel::make_data(cid, std::string(bytes));
}

Packet close_req(int64_t cid) { return konn::core::tunnel::make_close_request(cid); }

}  // namespace

TEST_CASE("fleet sim: Connect metadata, DIAL_REQ, DATA echo, CLOSE_REQ and DRAIN", "[fleet]") {
  FakeServer server;
  AgentLoop loop;
  fleet::Counters counters;
  fleet::AgentConfig cfg = tls_config(server.server->port());
  cfg.token = "t0ken";
  auto agent = std::make_shared<fleet::SimAgent>(loop.io, cfg, "fleet-7",
                                                 fleet::agent_identifiers(7), "", counters, 1);
  loop.run([&] { agent->start(); });
  REQUIRE(server.wait_calls(1));
  {
    std::lock_guard lock(server.mu);
    const h2::Metadata& md = server.calls[0];
    CHECK(h2::find_metadata(md, "agentid") == "fleet-7");
    CHECK(h2::find_metadata(md, "agentidentifiers") == "host=node-7&ipv4=10.0.0.8");
    CHECK(h2::find_metadata(md, "authorization") == "Bearer t0ken");
  }
  // Accepted once the response headers came.
  for (int i = 0; i < 200 && counters.connected.load() == 0; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  CHECK(counters.connected.load() == 1);

  server.send(dial_req(4242, "node-7:10250"));
  auto rsp = server.next_packet();
  REQUIRE(rsp);
  REQUIRE(rsp->type() == DIAL_RSP);
  CHECK(rsp->dialresponse().random() == 4242);
  CHECK(rsp->dialresponse().error().empty());
  const int64_t cid = rsp->dialresponse().connectid();
  CHECK(cid == 1);

  server.send(data(cid, "hello fleet"));
  auto echo = server.next_packet();
  REQUIRE(echo);
  REQUIRE(echo->type() == DATA);
  CHECK(echo->data().connectid() == cid);
  CHECK(echo->data().data() == "hello fleet");

  // A second dial gets the next connectID.
  server.send(dial_req(7, "node-7:22"));
  auto rsp2 = server.next_packet();
  REQUIRE(rsp2);
  CHECK(rsp2->dialresponse().connectid() == 2);
  CHECK(counters.tunnels_open.load() == 2);

  server.send(close_req(cid));
  auto closed = server.next_packet();
  REQUIRE(closed);
  REQUIRE(closed->type() == CLOSE_RSP);
  CHECK(closed->closeresponse().connectid() == cid);
  CHECK(closed->closeresponse().error().empty());
  CHECK(counters.tunnels_open.load() == 1);

  // Unknown tunnels: answered as upstream's agent answers them.
  server.send(close_req(cid));
  auto unknown = server.next_packet();
  REQUIRE(unknown);
  CHECK(unknown->type() == CLOSE_RSP);
  CHECK(unknown->closeresponse().error() == "Unknown connectID");
  server.send(data(99, "x"));
  auto unknown_data = server.next_packet();
  REQUIRE(unknown_data);
  CHECK(unknown_data->type() == CLOSE_RSP);
  CHECK(unknown_data->closeresponse().connectid() == 99);
  CHECK(unknown_data->closeresponse().error() == "unrecognized connectID");

  loop.run([&] { agent->drain(); });
  auto drain = server.next_packet();
  REQUIRE(drain);
  CHECK(drain->type() == DRAIN);
  CHECK(counters.dials.load() == 2);

  loop.run([&] { agent->stop(); });
  CHECK(counters.connected.load() == 0);
  CHECK(counters.tunnels_open.load() == 0);
}

TEST_CASE("fleet sim: --dial-real dials the address and relays both ways", "[fleet]") {
  FakeServer server;
  konn::testsupport::EchoServer echo;
  AgentLoop loop;
  fleet::Counters counters;
  fleet::AgentConfig cfg = tls_config(server.server->port());
  cfg.dial_real = true;
  auto agent = std::make_shared<fleet::SimAgent>(loop.io, cfg, "fleet-0",
                                                 fleet::agent_identifiers(0), "", counters, 2);
  loop.run([&] { agent->start(); });
  REQUIRE(server.wait_calls(1));

  server.send(dial_req(1, echo.address()));
  auto rsp = server.next_packet();
  REQUIRE(rsp);
  REQUIRE(rsp->type() == DIAL_RSP);
  REQUIRE(rsp->dialresponse().error().empty());
  const int64_t cid = rsp->dialresponse().connectid();
  server.send(data(cid, "through a real socket"));
  std::string got;
  while (got.size() < std::string("through a real socket").size()) {
    auto p = server.next_packet();
    REQUIRE(p);
    REQUIRE(p->type() == DATA);
    got += p->data().data();
  }
  CHECK(got == "through a real socket");
  CHECK(echo.accepted() == 1);

  // A destination that refuses: DIAL_RSP with the error, no tunnel.
  server.send(dial_req(2, "127.0.0.1:1"));
  auto refused = server.next_packet();
  REQUIRE(refused);
  CHECK(refused->type() == DIAL_RSP);
  CHECK(refused->dialresponse().random() == 2);
  CHECK_THAT(refused->dialresponse().error(), Catch::Contains("refused"));
  CHECK(counters.dial_failures.load() == 1);

  // CLOSE_REQ closes the socket.
  server.send(close_req(cid));
  auto closed = server.next_packet();
  REQUIRE(closed);
  CHECK(closed->type() == CLOSE_RSP);
  for (int i = 0; i < 200 && echo.active() != 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  CHECK(echo.active() == 0);
  loop.run([&] { agent->stop(); });
}

TEST_CASE("fleet sim: a lost stream reconnects at the next sync tick, failures back off",
          "[fleet]") {
  SECTION("the stream ends: back within one sync interval (jittered)") {
    FakeServer server;
    AgentLoop loop;
    fleet::Counters counters;
    fleet::AgentConfig cfg = tls_config(server.server->port());
    auto agent = std::make_shared<fleet::SimAgent>(loop.io, cfg, "fleet-1",
                                                   fleet::agent_identifiers(1), "", counters, 3);
    loop.run([&] { agent->start(); });
    REQUIRE(server.wait_calls(1));
    for (int i = 0; i < 200 && counters.connected.load() == 0; ++i) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    const auto ended = Clock::now();
    server.end_call();
    REQUIRE(server.wait_calls(2));
    const auto gap = std::chrono::duration_cast<milliseconds>(server.call_times[1] - ended);
    CHECK(gap <= milliseconds(100 * 11 / 10 + 150));  // one tick (110 ms) plus a handshake
    for (int i = 0; i < 200 && counters.reconnects.load() == 0; ++i) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    CHECK(counters.reconnects.load() == 1);
    CHECK(counters.connected.load() == 1);
    loop.run([&] { agent->stop(); });
  }
  SECTION("nothing listens: attempts 100, 150, 225, 337, 400 (cap) ms apart") {
    // A port that was free a moment ago.
    uint16_t port = 0;
    {
      asio::io_context io;
      asio::ip::tcp::acceptor a(io,
                                asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
      port = a.local_endpoint().port();
    }
    AgentLoop loop;
    fleet::Counters counters;
    fleet::AgentConfig cfg = tls_config(port);
    auto agent = std::make_shared<fleet::SimAgent>(loop.io, cfg, "fleet-2",
                                                   fleet::agent_identifiers(2), "", counters, 4);
    loop.run([&] { agent->start(); });
    std::this_thread::sleep_for(milliseconds(1500));
    loop.run([&] { agent->stop(); });
    // Attempts at 0, 100, 250, 475, 812, 1212 (+ up to 10 % each): 6. Without backoff (every
    // 100 ms) there would be 15; with none at all, thousands.
    CHECK(counters.connect_failures.load() >= 5);
    CHECK(counters.connect_failures.load() <= 7);
    CHECK(counters.connected.load() == 0);
  }
}

TEST_CASE("fleet sim: upstream's backoff sequence", "[fleet]") {
  fleet::UpstreamBackoff b(milliseconds(1000), milliseconds(10000), 9);
  const int64_t expected[] = {1000, 1500, 2250, 3375, 5062, 7593, 10000, 10000};
  for (int64_t e : expected) {
    const int64_t d = b.next().count();
    CHECK(d >= e);
    CHECK(d <= e * 11 / 10 + 1);
  }
  b.reset();
  CHECK(b.next().count() <= 1100);
  for (int i = 0; i < 100; ++i) {
    const int64_t f = b.first().count();
    CHECK(f >= 0);
    CHECK(f <= 1100);
  }
}

TEST_CASE("fleet sim: agent identifiers", "[fleet]") {
  CHECK(fleet::agent_identifiers(0) == "host=node-0&ipv4=10.0.0.1");
  CHECK(fleet::agent_ipv4(255) == "10.0.1.0");
  CHECK(fleet::agent_ipv4(19999) == "10.0.78.32");
}
