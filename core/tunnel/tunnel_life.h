#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <asio/any_io_executor.hpp>
#include <spdlog/logger.h>

#include "core/tunnel/credit.h"
#include "core/tunnel/quiet_timer.h"

namespace konn::core::tunnel {

// The policy of one tunnel, whatever carries it: what the to-peer watermarks, the credit window,
// the quiet timer and the queue cap are set to. Filled once by the owner before the dial.
struct TunnelPolicy {
  // Our bytes waiting in the shared stream towards the peer: reading our side pauses above
  // `to_peer_high` and resumes at or below `to_peer_low` (high/2 as a rule).
  int64_t to_peer_high = 0;
  int64_t to_peer_low = 0;
  // konn's per-tunnel credit (KONN_WINDOW_UPDATE) both ways: we send at most the window the peer
  // gave, and hand back what our side consumed. Without it (upstream peers) neither happens.
  bool flow_control = false;
  // Bytes from the peer waiting for our side beyond which the tunnel is closed alone (a peer
  // without flow control cannot be slowed down for one tunnel); 0: no cap. The frontends cap
  // only tunnels without flow control; the endpoint connection caps every one (a peer that
  // ignores its window is still bounded).
  size_t queue_cap = 0;
  // The tunnel may half-close (KONN_CLOSE_WRITE): the quiet timer then bounds a half-closed one.
  bool half_close = false;
  // --tunnel-idle-timeout (0: none) and --half-close-timeout.
  std::chrono::nanoseconds idle_timeout{0};
  std::chrono::nanoseconds half_close_timeout{0};

  // How long the tunnel may stay quiet: the idle limit, or once a side finished the half-close
  // limit (the idle limit when that is shorter). 0: no bound.
  std::chrono::nanoseconds quiet_limit(bool half_closed) const;
  // Whether the tunnel needs a quiet timer at all.
  bool bounded() const { return half_close || idle_timeout.count() > 0; }
};

// One tunnel's life, shared by everything that carries a tunnel over a shared stream (the gRPC
// and CONNECT frontends, the agent's and the node tunnels' endpoint connections): its state, the
// to-peer watermarks, the credit out and back, the quiet timer, the queue cap, the half-close
// accounting and what the close summary says. The owner keeps its I/O (sockets, streams, gates,
// metrics) and asks the life what to do.
//
// Threads: the state, the reason and the half-close flags belong to the owner's thread or lock
// (as the owner's own state did). The counters (watermarks, credit, bytes) are atomics, so the
// stream's thread may count what left the queue and a direct write may count what reached our
// side; the quiet timer is thread-safe (QuietTimer).
class TunnelLife {
 public:
  enum class State {
    Idle,         // nothing asked yet (a frontend waiting for its DIAL_REQ or CONNECT head)
    Dialing,      // the dial is under way: no DATA flows yet
    Established,  // DATA flows both ways (a side may have finished: half_closed())
    Closing,      // no more reads: queued bytes are flushed or the peer's close is awaited
    Closed,       // final: packets are dropped
  };
  // Which side of the tunnel finished sending (half-close).
  enum class Side {
    Local,  // ours: the client, the endpoint
    Peer,   // the far end over the shared stream: the agent, the server
  };

  explicit TunnelLife(State initial = State::Idle);
  ~TunnelLife();
  TunnelLife(const TunnelLife&) = delete;
  TunnelLife& operator=(const TunnelLife&) = delete;

  // Sets the policy (before the dial; then only read) and, when the policy bounds quiet
  // tunnels, creates the quiet timer on `ex`: `on_quiet` runs there once (it must hold its owner
  // weakly). The credit window starts full.
  void configure(const TunnelPolicy& policy, const asio::any_io_executor& ex,
                 std::function<void()> on_quiet);
  const TunnelPolicy& policy() const { return policy_; }

  // --- State (the owner's thread or lock) ---
  State state() const { return state_; }
  // The one transition function: logs "state A -> B" at trace with `prefix()` and returns the
  // state left. Entering Established arms the idle bound (the quiet timer stops with
  // end_half_close()). Closed is final: a later transition, or one to the same state, is ignored
  // and returns the current state.
  template <typename PrefixFn>
  State to(State next, spdlog::logger& log, PrefixFn&& prefix) {
    if (state_ == State::Closed || state_ == next) return state_;
    if (log.should_log(spdlog::level::trace)) log_transition(log, prefix(), next);
    return enter(next);
  }
  bool is(State s) const { return state_ == s; }
  // Established or Closing: the tunnel has a connectID and the peer may still send.
  bool open() const { return state_ == State::Established || state_ == State::Closing; }
  // The tunnel reached Established at some point (it counts in the established gauges).
  bool ever_established() const { return ever_established_; }

  // --- To-peer watermarks (any thread) ---
  // `n` of our bytes were queued towards the peer. True when this crossed the high watermark
  // and reading was not paused for it yet: the caller pauses (and counts one pause).
  bool queued_to_peer(size_t n);
  // `n` of our bytes left the queue (the stream's thread). True when reading is paused for the
  // queue and it is now at or below the low watermark: the caller calls resume_if_drained() on
  // its own thread (or does so at once under its lock).
  bool left_for_peer(size_t n);
  // True (once) when reading was paused for the queue and it drained: the caller resumes.
  bool resume_if_drained();
  bool paused_for_queue() const { return queue_paused_.load(); }
  int64_t queued_to_peer_bytes() const { return to_peer_.load(); }
  bool over_high_watermark() const { return to_peer_.load() > policy_.to_peer_high; }

  // --- Credit out: what the peer lets us send ---
  // The window is an atomic. What spend_credit() and add_credit() return decides a pause only
  // when both run on the owner's thread or under its lock; an owner that re-checks
  // out_of_credit() after arming its wait (the CONNECT reader) may add from any thread.
  // `n` bytes were sent. True when the window is used up now and reading was not paused for it
  // yet: the caller pauses (and counts one pause). Without flow control: never.
  bool spend_credit(size_t n);
  // KONN_WINDOW_UPDATE: the peer consumed `bytes` more. True when reading was paused for credit
  // and the window is open again: the caller resumes.
  bool add_credit(int64_t bytes);
  int64_t credit() const { return credit_.load(); }
  bool out_of_credit() const { return policy_.flow_control && credit_.load() <= 0; }
  // How much one read may take: the credit left with flow control, else `chunk`.
  size_t read_limit(size_t chunk) const;

  // --- Credit back: what we hand the peer back (any thread) ---
  // `n` bytes reached our side: returns the credit to send back now in one WindowUpdate, or 0
  // (always 0 without flow control).
  int64_t consumed(size_t n);

  // --- Queue cap (any thread) ---
  // Whether `waiting` bytes from the peer waiting for our side pass the cap.
  bool over_cap(size_t waiting) const {
    return policy_.queue_cap > 0 && waiting > policy_.queue_cap;
  }

  // --- Quiet timer and half-close (the owner's thread or lock, touch: any thread) ---
  // Bytes moved, either way.
  void touch() {
    if (quiet_) quiet_->touch();
  }
  // `side` finished sending. True the first time a side finishes while Established: the caller
  // counts the tunnel in its half-closed gauge; the quiet timer moves to the half-close limit.
  bool one_side_finished(Side side);
  // Records that `side` finished, without the half-close bound or count (the tunnel closes now).
  void finished_sending(Side side) { (side == Side::Local ? local_done_ : peer_done_) = true; }
  bool finished(Side side) const { return side == Side::Local ? local_done_ : peer_done_; }
  bool half_closed() const { return local_done_ || peer_done_; }
  // Counted in the half-closed gauge (any thread: status pages read it).
  bool half_counted() const { return half_counted_.load(); }
  // The tunnel ends: the quiet timer stops; true (once) when it was counted half-closed, so the
  // caller takes it out of its gauge.
  bool end_half_close();

  // --- Close summary ---
  // The first reason given wins (the owner's thread or lock).
  void set_reason(std::string reason) {
    if (reason_.empty()) reason_ = std::move(reason);
  }
  // Replaces whatever was said (a cap or a timeout says more than the first reason).
  void replace_reason(std::string reason) { reason_ = std::move(reason); }
  void append_reason(std::string_view more) { reason_ += more; }
  const std::string& reason() const { return reason_; }
  // Bytes from our side to the peer, and from the peer to our side (any thread).
  void count_out(size_t n) { bytes_out_.fetch_add(n, std::memory_order_relaxed); }
  void count_in(size_t n) { bytes_in_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t bytes_out() const { return bytes_out_.load(std::memory_order_relaxed); }
  uint64_t bytes_in() const { return bytes_in_.load(std::memory_order_relaxed); }
  std::chrono::steady_clock::time_point started() const { return started_; }
  // Since the life began, in milliseconds.
  int64_t duration_ms() const;

 private:
  State enter(State next);
  void log_transition(spdlog::logger& log, std::string_view prefix, State next) const;

  TunnelPolicy policy_;
  State state_;
  bool ever_established_ = false;
  std::unique_ptr<QuietTimer> quiet_;
  bool local_done_ = false;
  bool peer_done_ = false;
  std::atomic<bool> half_counted_{false};
  std::atomic<int64_t> to_peer_{0};
  // Reading paused for the queue: only then does left_for_peer() ask the owner to look. Stored
  // and re-checked sequentially consistent against to_peer_, so a pause and the last write
  // cannot miss each other.
  std::atomic<bool> queue_paused_{false};
  std::atomic<int64_t> credit_{kTunnelWindow};
  std::atomic<bool> credit_paused_{false};
  CreditReturn credit_back_;
  std::string reason_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::atomic<uint64_t> bytes_out_{0};
  std::atomic<uint64_t> bytes_in_{0};
};

const char* to_string(TunnelLife::State s);

}  // namespace konn::core::tunnel
