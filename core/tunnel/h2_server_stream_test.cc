#include "core/tunnel/h2_server_stream.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include "core/h2/h2_test_peer.h"
#include "core/tunnel/packet.h"

using namespace std::chrono_literals;
using konn::core::h2::CallInfo;
using konn::core::h2::testing::ClientCall;
using konn::core::h2::Stream;
using konn::core::h2::testing::connect_client;
using konn::core::h2::testing::H2Server;
using konn::core::h2::testing::Kind;
using konn::core::h2::testing::Loop;
using konn::core::tunnel::H2ServerStream;
using konn::core::tunnel::make_data;

namespace {

std::string serialized(const Packet& p) {
  std::string out;
  p.SerializeToString(&out);
  return out;
}

struct Counters {
  std::atomic<int> over{0};
  std::atomic<int> packets{0};
  std::atomic<bool> peer_cancelled{false};
};

// A call that echoes every Packet (or, with agentid "refuse", finishes PERMISSION_DENIED before
// reading; with "idle", never reads), and finishes OK once the client half-closed. `echo_from` (optional) sends each echo
// from another thread, as a tunnel on another worker would.
class EchoStream : public H2ServerStream {
 public:
  static void serve(asio::io_context& home, const std::shared_ptr<Stream>& stream,
                    const CallInfo& call, Counters& counters, Loop* echo_from) {
    auto s = std::shared_ptr<EchoStream>(new EchoStream(counters, echo_from));
    s->self_ = s;
    s->attach(home, stream);
    auto agent = konn::core::h2::find_metadata(call.metadata, "agentid").value_or("");
    if (agent == "refuse") {
      s->close({konn::core::h2::grpc_code::kPermissionDenied, "refused"});
      return;
    }
    if (agent == "idle") return;  // never reads: paused, as a tunnel held back by its agent
    s->start_reading();
  }

 private:
  EchoStream(Counters& c, Loop* echo_from) : counters_(c), echo_from_(echo_from) {}
  void on_packet(Packet&& p) override {
    ++counters_.packets;
    if (echo_from_ == nullptr) {
      send(std::move(p));
      return;
    }
    auto self = self_;
    asio::post(echo_from_->ctx(), [self, p = std::move(p)]() mutable { self->send(std::move(p)); });
  }
  void on_read_end() override { close(); }
  void call_over() override {
    mark_done();
    counters_.peer_cancelled = peer_cancelled();
    ++counters_.over;
    self_.reset();
  }

  Counters& counters_;
  Loop* echo_from_;
  std::shared_ptr<EchoStream> self_;
};

// A server whose calls are EchoStreams, and one client connection to it.
struct EchoFixture {
  explicit EchoFixture(Loop* echo_from = nullptr)
      : server(Kind::Tcp, [this, echo_from](const std::shared_ptr<Stream>& s,
                                            const CallInfo& call) {
          EchoStream::serve(server.loop().ctx(), s, call, counters, echo_from);
        }),
        conn(connect_client(loop, Kind::Tcp, server.target())) {}

  Counters counters;
  H2Server server;
  Loop loop;
  std::shared_ptr<konn::core::h2::Connection> conn;
};

bool wait_for(const std::function<bool()>& cond, std::chrono::milliseconds timeout = 5s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return cond();
}

}  // namespace

TEST_CASE("H2ServerStream: packets echoed in order, the client's half-close ends the call OK",
          "[tunnel][h2]") {
  for (bool other_thread : {false, true}) {
    INFO("echo sent from " << (other_thread ? "another thread" : "the connection's thread"));
    Loop elsewhere;
    EchoFixture f(other_thread ? &elsewhere : nullptr);
    auto& counters = f.counters;
    ClientCall call(f.loop, f.conn, "/AgentService/Connect", {{"agentid", "a"}});
    for (int i = 1; i <= 50; ++i) call.send(serialized(make_data(i, std::string(i * 7, 'x'))));
    REQUIRE(call.wait_messages(50));
    call.half_close();
    auto r = call.wait_end();
    REQUIRE(r);
    CHECK(r->status.code == 0);
    REQUIRE(r->messages.size() == 50);
    for (int i = 0; i < 50; ++i) {
      Packet p;
      REQUIRE(p.ParseFromString(r->messages[i]));
      CHECK(p.data().connectid() == i + 1);
      CHECK(p.data().data().size() == static_cast<size_t>((i + 1) * 7));
    }
    CHECK(wait_for([&] { return counters.over == 1; }));
    CHECK_FALSE(counters.peer_cancelled);
  }
}

TEST_CASE("H2ServerStream: a call finished before its first read ends, though the client keeps "
          "sending on an open connection",
          "[tunnel][h2]") {
  EchoFixture f;
  auto& counters = f.counters;
  for (int round = 1; round <= 3; ++round) {
    ClientCall call(f.loop, f.conn, "/AgentService/Connect", {{"agentid", "refuse"}});
    call.send(serialized(make_data(1, "early")));
    auto r = call.wait_end();
    REQUIRE(r);
    CHECK(r->status.code == 7);
    CHECK(r->status.message == "refused");
    // The connection stays open; each refused call is over on the server all the same.
    CHECK(wait_for([&] { return counters.over == round; }));
  }
  CHECK(counters.packets == 0);
}

TEST_CASE("H2ServerStream: a message that is not a Packet ends the call INTERNAL",
          "[tunnel][h2]") {
  EchoFixture f;
  auto& counters = f.counters;
  ClientCall call(f.loop, f.conn, "/AgentService/Connect", {{"agentid", "a"}});
  call.send(serialized(make_data(1, "fine")));
  REQUIRE(call.wait_messages(1));
  call.send(std::string("\xff\xff\xff", 3));  // not a protobuf message
  auto r = call.wait_end();
  REQUIRE(r);
  CHECK(r->status.code == 13);
  CHECK(r->status.message.find("not a Packet") != std::string::npos);
  CHECK(wait_for([&] { return counters.over == 1; }));
}

TEST_CASE("H2ServerStream: a client's reset ends the call as cancelled by the peer",
          "[tunnel][h2]") {
  EchoFixture f;
  auto& counters = f.counters;
  ClientCall call(f.loop, f.conn, "/AgentService/Connect", {{"agentid", "a"}});
  call.send(serialized(make_data(1, "x")));
  REQUIRE(call.wait_messages(1));
  call.cancel();
  REQUIRE(call.wait_end());
  CHECK(wait_for([&] { return counters.over == 1; }));
  CHECK(counters.peer_cancelled);
}

TEST_CASE("H2ServerStream: a client's reset ends a call that is not reading", "[tunnel][h2]") {
  EchoFixture f;
  auto& counters = f.counters;
  ClientCall call(f.loop, f.conn, "/AgentService/Connect", {{"agentid", "idle"}});
  call.send(serialized(make_data(1, "held")));
  std::this_thread::sleep_for(50ms);
  CHECK(counters.over == 0);
  call.cancel();
  REQUIRE(call.wait_end());
  // Learnt at once, though no read was outstanding and the connection stays open.
  CHECK(wait_for([&] { return counters.over == 1; }));
  CHECK(counters.peer_cancelled);
  CHECK(counters.packets == 0);
}
