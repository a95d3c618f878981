#include "core/tunnel/packet_stream.h"

#include <map>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "core/tunnel/packet.h"

using namespace konn::core::tunnel;
using konn::core::relay::PauseReason;

namespace {

// Records what the driver asks of the transport; the test plays the transport's completions.
class FakeStream : public PacketStream {
 public:
  static std::shared_ptr<FakeStream> create() {
    return std::shared_ptr<FakeStream>(new FakeStream());
  }
  using PacketStream::handle_read_done;
  using PacketStream::handle_write_done;
  using PacketStream::start_reading;

  std::vector<std::string> writes;  // describe() of each started write
  std::vector<Packet> written;      // each started write
  std::vector<bool> hints;
  int reads = 0;
  int finishes = 0;
  int cancels = 0;
  std::vector<Packet> received;
  int read_ends = 0;
  Packet* read_target = nullptr;

 protected:
  void start_write_op(const Packet* p, WriteOptions opts) override {
    writes.push_back(describe(*p));
    written.push_back(*p);
    hints.push_back(opts.buffer_hint);
  }
  void start_read_op(Packet* p) override {
    ++reads;
    read_target = p;
  }
  void start_finish_op(const konn::core::h2::GrpcStatus&) override { ++finishes; }
  void cancel_op(const konn::core::h2::GrpcStatus&) override { ++cancels; }
  void on_packet(Packet&& p) override { received.push_back(std::move(p)); }
  void on_read_end() override { ++read_ends; }

 private:
  FakeStream() = default;
};

class CountingListener : public WriteListener {
 public:
  void on_written(size_t bytes) override { total += bytes; }
  size_t total = 0;
};

}  // namespace

TEST_CASE("one write in flight, waiting DATA of a tunnel is merged", "[tunnel]") {
  auto s = FakeStream::create();
  auto l = std::make_shared<CountingListener>();
  REQUIRE(s->send(make_data(1, std::string(100, 'a')), l));
  REQUIRE(s->send(make_data(1, std::string(50, 'b')), l));
  REQUIRE(s->send(make_data(1, std::string(25, 'c')), l));
  REQUIRE(s->send(make_data(2, std::string(10, 'd')), l));
  CHECK(s->writes == std::vector<std::string>{"DATA connectID=1 bytes=100"});
  CHECK(s->queued_bytes() == 185);
  s->handle_write_done(true);
  CHECK(l->total == 100);
  REQUIRE(s->writes.size() == 2);
  CHECK(s->writes[1] == "DATA connectID=1 bytes=75");  // 50 + 25 merged
  CHECK(s->hints[1]);                                  // connectID 2 still waits
  s->handle_write_done(true);
  CHECK(s->writes[2] == "DATA connectID=2 bytes=10");
  CHECK_FALSE(s->hints[2]);
  s->handle_write_done(true);
  CHECK(l->total == 185);
  CHECK(s->queued_bytes() == 0);
}

TEST_CASE("tunnels take turns: a few bytes wait behind one packet of a busy tunnel", "[tunnel]") {
  auto s = FakeStream::create();
  const std::string chunk(kReadChunk, 'x');
  REQUIRE(s->send(make_data(1, std::string(chunk))));  // written at once
  for (int i = 0; i < 3; ++i) REQUIRE(s->send(make_data(1, std::string(chunk))));
  REQUIRE(s->send(make_close_response(1)));
  REQUIRE(s->send(make_data(2, "ping")));
  REQUIRE(s->send(make_dial_response(9, 3)));
  REQUIRE(s->send(make_data(3, "hello")));
  // Dials, dial errors and credit go before any DATA; a tunnel's own packets keep their order.
  REQUIRE(s->send(make_window_update(4, 100)));
  REQUIRE(s->send(make_dial_response(10, 0, "refused")));
  while (s->writes.size() < 10) s->handle_write_done(true);
  const std::string big = "DATA connectID=1 bytes=" + std::to_string(kReadChunk);
  CHECK(s->writes == std::vector<std::string>{
                         big, describe(make_window_update(4, 100)),
                         describe(make_dial_response(10, 0, "refused")), big,
                         "DATA connectID=2 bytes=4", describe(make_dial_response(9, 3)), big,
                         "DATA connectID=3 bytes=5", big, describe(make_close_response(1))});
  s->handle_write_done(true);
  CHECK(s->queued_bytes() == 0);
  CHECK_FALSE(s->hints.back());
}

TEST_CASE("random traffic: every packet is written once and keeps its tunnel's order", "[tunnel]") {
  // Each tunnel's traffic as one string: DATA bytes as they are, other packets as a marker, so
  // merged DATA compares equal and a packet that passed its tunnel's bytes does not.
  auto tunnel_view = [](const Packet& p) {
    return p.type() == DATA ? p.data().data() : "<" + describe(p) + ">";
  };
  std::mt19937 rng(20261126);
  for (int round = 0; round < 200; ++round) {
    auto s = FakeStream::create();
    std::map<int64_t, std::string> sent;  // per tunnel
    std::vector<std::string> sent_control;
    size_t completed = 0;  // writes gRPC finished
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    for (int op = 0; op < 60; ++op) {
      const int64_t t = 1 + pick(4);
      Packet p;
      switch (pick(7)) {
        case 0:
        case 1: {
          static const size_t sizes[] = {1, 100, kSmallRead - 1, kSmallRead, kReadChunk};
          p = make_data(t, std::string(sizes[pick(5)], static_cast<char>('a' + pick(26))));
          break;
        }
        case 2:
          p = make_close_response(t);
          break;
        case 3:
          p = pick(2) == 0 ? make_window_update(t, 1024) : make_dial_response(100 + t, 0, "no");
          break;
        default:
          if (completed < s->written.size()) {  // a write is in flight: gRPC finishes it
            ++completed;
            s->handle_write_done(true);
          }
          continue;
      }
      if (p.type() == KONN_WINDOW_UPDATE || p.type() == DIAL_RSP) {
        sent_control.push_back(describe(p));
      } else {
        sent[t] += tunnel_view(p);
      }
      REQUIRE(s->send(std::move(p)));
    }
    for (; completed < s->written.size(); ++completed) s->handle_write_done(true);
    std::map<int64_t, std::string> got;
    std::vector<std::string> got_control;
    for (const auto& p : s->written) {
      if (p.type() == KONN_WINDOW_UPDATE || p.type() == DIAL_RSP) {
        got_control.push_back(describe(p));
      } else {
        got[p.type() == DATA ? p.data().connectid() : p.closeresponse().connectid()] +=
            tunnel_view(p);
      }
    }
    REQUIRE(got == sent);
    REQUIRE(got_control == sent_control);
    REQUIRE(s->queued_bytes() == 0);
  }
}

TEST_CASE("graceful close flushes, then finishes once", "[tunnel]") {
  auto s = FakeStream::create();
  s->send(make_dial_response(5, 1));
  s->send(make_close_response(1));
  s->close();
  CHECK_FALSE(s->send(make_data(1, "late")));
  CHECK(s->finishes == 0);
  s->handle_write_done(true);
  CHECK(s->finishes == 0);
  s->handle_write_done(true);
  CHECK(s->finishes == 1);
  s->close();
  CHECK(s->finishes == 1);
}

TEST_CASE("abort drops the queue and cancels, finish follows the in-flight write", "[tunnel]") {
  auto s = FakeStream::create();
  s->send(make_data(1, std::string(10, 'x')));
  s->send(make_data(2, std::string(10, 'y')));
  s->close({konn::core::h2::grpc_code::kCancelled, ""}, true);
  CHECK(s->cancels == 1);
  CHECK(s->finishes == 0);
  CHECK(s->queued_bytes() == 10);
  s->handle_write_done(false);
  CHECK(s->finishes == 1);
  CHECK(s->writes.size() == 1);
}

TEST_CASE("reads are serialized and gated", "[tunnel]") {
  auto s = FakeStream::create();
  s->start_reading();
  CHECK(s->reads == 1);
  s->pause_reading(PauseReason::QueueFull);
  *s->read_target = make_data(3, "abc");
  s->handle_read_done(true);
  REQUIRE(s->received.size() == 1);
  CHECK(s->received[0].data().data() == "abc");
  CHECK(s->reads == 1);  // paused: no new read
  s->resume_reading(PauseReason::QueueFull);
  CHECK(s->reads == 2);
  s->resume_reading(PauseReason::QueueFull);
  CHECK(s->reads == 2);  // already reading
  s->handle_read_done(false);
  CHECK(s->read_ends == 1);
  CHECK(s->reads == 2);
}

TEST_CASE("node tunnels have lanes of their own, apart from forward tunnels of the same id",
          "[tunnel]") {
  auto s = FakeStream::create();
  const std::string chunk(kReadChunk, 'x');
  REQUIRE(s->send(make_data(1, std::string(chunk))));  // written at once
  REQUIRE(s->send(make_data(1, std::string(chunk))));
  REQUIRE(s->send(make_data(1, std::string(chunk))));
  // Node connectID 1 is another tunnel: it takes its turn rather than waiting behind the
  // forward tunnel 1, and its small DATA merge only with its own.
  REQUIRE(s->send(as_node(make_data(1, "a"))));
  REQUIRE(s->send(as_node(make_data(1, "b"))));
  REQUIRE(s->send(as_node(make_close_response(1))));
  // A node dial answer with an error and node credit go before any DATA.
  REQUIRE(s->send(as_node(make_window_update(1, 10))));
  CHECK(s->queued_bytes() == 3 * kReadChunk + 2);
  while (s->writes.size() < 6) s->handle_write_done(true);
  const std::string big = "DATA connectID=1 bytes=" + std::to_string(kReadChunk);
  CHECK(s->writes == std::vector<std::string>{big, "KONN_NODE_WINDOW_UPDATE connectID=1 bytes=10",
                                              big, "KONN_NODE_DATA connectID=1 bytes=2", big,
                                              "KONN_NODE_CLOSE connectID=1"});
  s->handle_write_done(true);
  CHECK(s->queued_bytes() == 0);
}
