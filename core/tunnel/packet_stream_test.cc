#include "core/tunnel/packet_stream.h"

#include <vector>

#include <catch2/catch.hpp>

#include "core/tunnel/packet.h"

using namespace konn::core::tunnel;
using konn::core::relay::PauseReason;

namespace {

// Records what the driver asks of gRPC; the test plays gRPC's completions.
class FakeStream : public PacketStream {
 public:
  static std::shared_ptr<FakeStream> create() {
    return std::shared_ptr<FakeStream>(new FakeStream());
  }
  using PacketStream::handle_read_done;
  using PacketStream::handle_write_done;
  using PacketStream::start_reading;

  std::vector<std::string> writes;  // describe() of each started write
  std::vector<bool> hints;
  int reads = 0;
  int finishes = 0;
  int cancels = 0;
  std::vector<Packet> received;
  int read_ends = 0;
  Packet* read_target = nullptr;

 protected:
  void start_write_op(const Packet* p, grpc::WriteOptions opts) override {
    writes.push_back(describe(*p));
    hints.push_back(opts.get_buffer_hint());
  }
  void start_read_op(Packet* p) override {
    ++reads;
    read_target = p;
  }
  void start_finish_op(const grpc::Status&) override { ++finishes; }
  void cancel_op(const grpc::Status&) override { ++cancels; }
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

TEST_CASE("graceful close flushes, then finishes once", "[tunnel]") {
  auto s = FakeStream::create();
  s->send(make_dial_response(5, 1));
  s->send(make_close_response(1));
  s->close(grpc::Status::OK);
  CHECK_FALSE(s->send(make_data(1, "late")));
  CHECK(s->finishes == 0);
  s->handle_write_done(true);
  CHECK(s->finishes == 0);
  s->handle_write_done(true);
  CHECK(s->finishes == 1);
  s->close(grpc::Status::OK);
  CHECK(s->finishes == 1);
}

TEST_CASE("abort drops the queue and cancels, finish follows the in-flight write", "[tunnel]") {
  auto s = FakeStream::create();
  s->send(make_data(1, std::string(10, 'x')));
  s->send(make_data(2, std::string(10, 'y')));
  s->close(grpc::Status::CANCELLED, true);
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
