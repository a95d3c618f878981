#include "core/tunnel/tunnel_life.h"

#include <atomic>
#include <thread>

#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <spdlog/sinks/ostream_sink.h>

using konn::core::tunnel::kTunnelWindow;
using konn::core::tunnel::kWindowUpdateThreshold;
using konn::core::tunnel::TunnelLife;
using konn::core::tunnel::TunnelPolicy;
using State = TunnelLife::State;
using Side = TunnelLife::Side;
using namespace std::chrono_literals;

namespace {

struct Fixture {
  asio::io_context ctx;
  std::ostringstream lines;
  std::shared_ptr<spdlog::logger> log;
  TunnelLife life;
  std::atomic<int> quiet{0};

  Fixture() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines);
    sink->set_pattern("%v");
    log = std::make_shared<spdlog::logger>("tunnel-life-test", sink);
    log->set_level(spdlog::level::trace);
  }
  void configure(const TunnelPolicy& p) {
    life.configure(p, ctx.get_executor(), [this] { ++quiet; });
  }
  State to(State s) {
    return life.to(s, *log, [] { return std::string("[C1 D2 A3] "); });
  }
  void run_for(std::chrono::milliseconds d) {
    ctx.restart();
    ctx.run_for(d);
  }
};

TunnelPolicy half_closing(std::chrono::milliseconds limit) {
  TunnelPolicy p;
  p.half_close = true;
  p.half_close_timeout = limit;
  return p;
}

TunnelPolicy watermarks(int64_t high) {
  TunnelPolicy p;
  p.to_peer_high = high;
  p.to_peer_low = high / 2;
  return p;
}

}  // namespace

TEST_CASE("a tunnel life logs each transition once and stays Closed", "[tunnel][life]") {
  Fixture f;
  CHECK(f.life.state() == State::Idle);
  CHECK(TunnelLife(State::Dialing).state() == State::Dialing);
  CHECK(f.to(State::Dialing) == State::Idle);
  CHECK_FALSE(f.life.ever_established());
  CHECK(f.to(State::Established) == State::Dialing);
  CHECK(f.life.open());
  CHECK(f.to(State::Established) == State::Established);  // no transition, no line
  CHECK(f.to(State::Closing) == State::Established);
  CHECK(f.to(State::Closed) == State::Closing);
  CHECK_FALSE(f.life.open());
  CHECK(f.life.ever_established());
  CHECK(f.to(State::Established) == State::Closed);  // final
  CHECK(f.life.state() == State::Closed);
  f.log->flush();
  CHECK(f.lines.str() ==
        "[C1 D2 A3] state Idle -> Dialing\n"
        "[C1 D2 A3] state Dialing -> Established\n"
        "[C1 D2 A3] state Established -> Closing\n"
        "[C1 D2 A3] state Closing -> Closed\n");
  CHECK(std::string(to_string(State::Closing)) == "Closing");
}

TEST_CASE("the to-peer watermarks pause once above high and resume once at low", "[tunnel][life]") {
  Fixture f;
  f.configure(watermarks(100));
  CHECK_FALSE(f.life.queued_to_peer(100));  // at the mark: still reading
  CHECK(f.life.queued_to_peer(1));          // above: pause, counted once
  CHECK_FALSE(f.life.queued_to_peer(50));   // already paused
  CHECK(f.life.paused_for_queue());
  CHECK_FALSE(f.life.left_for_peer(100));  // 51 left: above low
  CHECK_FALSE(f.life.resume_if_drained());
  CHECK(f.life.left_for_peer(1));  // 50: at low, the owner is asked to look
  CHECK(f.life.resume_if_drained());
  CHECK_FALSE(f.life.resume_if_drained());  // once
  CHECK_FALSE(f.life.left_for_peer(10));    // not paused: nobody to wake
  CHECK(f.life.queued_to_peer_bytes() == 40);
}

TEST_CASE("a pause and the last write from another thread cannot miss each other",
          "[tunnel][life]") {
  // The owner pauses above high and re-checks; the stream's thread drains everything meanwhile.
  // Whoever comes second must see the other: the tunnel is never left paused and empty.
  for (int round = 0; round < 200; ++round) {
    Fixture f;
    f.configure(watermarks(1000));
    std::atomic<bool> woken{false};
    std::thread stream([&] {
      for (int i = 0; i < 11; ++i) {
        if (f.life.left_for_peer(100)) woken = true;
      }
    });
    bool paused = f.life.queued_to_peer(1100);
    bool resumed = paused && f.life.resume_if_drained();
    stream.join();
    if (paused && !resumed) {
      REQUIRE(woken.load());  // the stream asked the owner to look
      CHECK(f.life.resume_if_drained());
    }
    CHECK_FALSE(f.life.paused_for_queue());
  }
}

TEST_CASE("credit out pauses when the window is used and resumes on a window update",
          "[tunnel][life]") {
  Fixture f;
  TunnelPolicy p;
  p.flow_control = true;
  f.configure(p);
  CHECK(f.life.credit() == kTunnelWindow);
  CHECK(f.life.read_limit(256 * 1024) == static_cast<size_t>(kTunnelWindow));
  CHECK_FALSE(f.life.spend_credit(kTunnelWindow - 1));
  CHECK(f.life.read_limit(256 * 1024) == 1);
  CHECK(f.life.spend_credit(1));  // used up: pause once
  CHECK(f.life.out_of_credit());
  CHECK(f.life.read_limit(256 * 1024) == 0);
  CHECK_FALSE(f.life.spend_credit(0));
  CHECK_FALSE(f.life.add_credit(0));  // still none
  CHECK(f.life.add_credit(10));       // open again: resume once
  CHECK_FALSE(f.life.add_credit(10));
  CHECK(f.life.credit() == 20);

  SECTION("without flow control nothing pauses and every read takes a chunk") {
    Fixture g;
    g.configure(TunnelPolicy{});
    CHECK_FALSE(g.life.spend_credit(2 * kTunnelWindow));
    CHECK_FALSE(g.life.out_of_credit());
    CHECK(g.life.read_limit(4096) == 4096);
    CHECK(g.life.consumed(kTunnelWindow) == 0);
  }
}

TEST_CASE("credit back goes to the peer in batches", "[tunnel][life]") {
  Fixture f;
  TunnelPolicy p;
  p.flow_control = true;
  f.configure(p);
  CHECK(f.life.consumed(kWindowUpdateThreshold - 1) == 0);
  CHECK(f.life.consumed(1) == kWindowUpdateThreshold);
  CHECK(f.life.consumed(1) == 0);
}

TEST_CASE("the queue cap closes a tunnel past it, if it has one", "[tunnel][life]") {
  Fixture f;
  TunnelPolicy p;
  p.queue_cap = 1000;
  f.configure(p);
  CHECK_FALSE(f.life.over_cap(1000));
  CHECK(f.life.over_cap(1001));
  Fixture h;
  h.configure(TunnelPolicy{});  // no cap
  CHECK_FALSE(h.life.over_cap(1 << 30));
}

TEST_CASE("an established tunnel with an idle limit is closed once quiet, not while busy",
          "[tunnel][life]") {
  Fixture f;
  TunnelPolicy p;
  p.idle_timeout = 150ms;
  f.configure(p);
  f.to(State::Dialing);
  f.run_for(250ms);
  CHECK(f.quiet == 0);  // not armed before Established
  f.to(State::Established);
  for (int i = 0; i < 6; ++i) {  // 300 ms of traffic every 50 ms
    f.life.touch();
    f.run_for(50ms);
  }
  CHECK(f.quiet == 0);
  f.run_for(300ms);
  CHECK(f.quiet == 1);
}

TEST_CASE("the first side to finish counts once and starts the half-close bound",
          "[tunnel][life]") {
  Fixture f;
  f.configure(half_closing(100ms));
  f.to(State::Dialing);
  CHECK_FALSE(f.life.one_side_finished(Side::Local));  // not established: not counted
  f.to(State::Established);
  f.run_for(200ms);
  CHECK(f.quiet == 0);  // no idle limit
  CHECK(f.life.one_side_finished(Side::Peer));
  CHECK_FALSE(f.life.one_side_finished(Side::Local));  // counted once
  CHECK(f.life.half_closed());
  CHECK(f.life.finished(Side::Local));
  CHECK(f.life.half_counted());
  f.run_for(300ms);
  CHECK(f.quiet == 1);
  CHECK(f.life.end_half_close());
  CHECK_FALSE(f.life.end_half_close());  // once
  CHECK_FALSE(f.life.half_counted());
}

TEST_CASE("the half-close bound is the idle limit when that is shorter", "[tunnel][life]") {
  TunnelPolicy p;
  p.half_close = true;
  p.half_close_timeout = 30s;
  CHECK(p.quiet_limit(true) == 30s);
  CHECK(p.quiet_limit(false) == 0s);
  p.idle_timeout = 10s;
  CHECK(p.quiet_limit(true) == 10s);
  CHECK(p.quiet_limit(false) == 10s);
  TunnelPolicy none;
  CHECK_FALSE(none.bounded());
  CHECK(p.bounded());
}

TEST_CASE("a tunnel that ended does not fire its quiet timer", "[tunnel][life]") {
  Fixture f;
  f.configure(half_closing(100ms));
  f.to(State::Established);
  CHECK(f.life.one_side_finished(Side::Local));
  CHECK(f.life.end_half_close());
  f.run_for(300ms);
  CHECK(f.quiet == 0);
}

TEST_CASE("a side that finishes as the tunnel closes is recorded, not counted", "[tunnel][life]") {
  Fixture f;
  f.configure(half_closing(100ms));
  f.to(State::Established);
  f.life.finished_sending(Side::Peer);
  CHECK(f.life.finished(Side::Peer));
  CHECK_FALSE(f.life.finished(Side::Local));
  CHECK_FALSE(f.life.half_counted());
  f.run_for(300ms);
  CHECK(f.quiet == 0);  // no half-close bound started
  CHECK_FALSE(f.life.end_half_close());
}

TEST_CASE("the close summary keeps the first reason and counts bytes both ways", "[tunnel][life]") {
  Fixture f;
  f.life.set_reason("closed by agent");
  f.life.set_reason("frontend stream ended");
  CHECK(f.life.reason() == "closed by agent");
  f.life.append_reason(" (flush timed out)");
  CHECK(f.life.reason() == "closed by agent (flush timed out)");
  f.life.replace_reason("write queue over its cap");
  CHECK(f.life.reason() == "write queue over its cap");
  f.life.count_out(10);
  f.life.count_in(7);
  f.life.count_in(3);
  CHECK(f.life.bytes_out() == 10);
  CHECK(f.life.bytes_in() == 10);
  CHECK(f.life.duration_ms() >= 0);
}
