#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "core/tunnel/completion_driver.h"
#include "core/tunnel/packet_stream.h"

namespace konn::core::tunnel {

// Server calls whose request is pending, or whose call has not ended yet. After a server's
// Shutdown (which fails pending requests and cancels calls), the completion queue their
// operations run on may be shut down only once there are none: a call still ending would start
// its finish operation on a queue that is shut down, which gRPC refuses by aborting.
class LiveCalls {
 public:
  void add() {
    std::lock_guard lock(mu_);
    ++count_;
  }
  void remove() {
    std::lock_guard lock(mu_);
    if (--count_ == 0) cv_.notify_all();
  }
  // Waits until none is left; false when `timeout` passed first.
  bool wait_none(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return count_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
};

// A PacketStream whose call runs on gRPC's completion-queue API (a CompletionDriver), keeping the
// callback API's contract for its owner: `Derived::call_over()` runs once, after every operation
// started on the call has completed and the finish operation was issued (PacketStream's rules
// keep at most one read and one write outstanding).
//
// The count: arm() with the holds a call starts with (the finish hold, released by
// release_finish_hold() once the finish operation is issued; on a server, also the done
// notification, whose completion calls settle()); every operation adds one when started, through
// the tag functions below, and removes it when its completion ran. Reads and writes complete into
// PacketStream's handlers; the derived class owns any other operation's tag and calls settle()
// from its completion.
template <class Derived>
class AsyncPacketStream : public PacketStream {
 protected:
  AsyncPacketStream() = default;

  void arm(int holds) { outstanding_.store(holds); }
  // Tags for starting an operation: each counts it as outstanding.
  void* read_tag() { return tag(&read_tag_); }
  void* write_tag() { return tag(&write_tag_); }
  void* settle_tag() { return tag(&settle_tag_); }  // an operation with nothing to do but settle
  // A server call's done notification (AsyncNotifyWhenDone): not counted here, it is one of the
  // holds given to arm().
  void* done_tag() { return hand_over(&settle_tag_); }
  void* tag(CompletionTag* t) {
    outstanding_.fetch_add(1);
    return hand_over(t);
  }
  // Call right after issuing the finish operation.
  void release_finish_hold() { settle(); }
  // One operation (or hold) is over; the last one ends the call.
  void settle() {
    if (outstanding_.fetch_sub(1) == 1) static_cast<Derived*>(this)->call_over();
  }

 private:
  void on_read(bool ok) {
    handle_read_done(ok);
    settle();
  }
  void on_write(bool ok) {
    handle_write_done(ok);
    settle();
  }
  void on_settle(bool) { settle(); }

  using Self = AsyncPacketStream;
  std::atomic<int> outstanding_{0};
  MemberTag<Self, &Self::on_read> read_tag_{this};
  MemberTag<Self, &Self::on_write> write_tag_{this};
  MemberTag<Self, &Self::on_settle> settle_tag_{this};
};

}  // namespace konn::core::tunnel
