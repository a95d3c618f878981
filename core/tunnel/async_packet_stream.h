#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include <grpcpp/server_context.h>
#include <grpcpp/support/async_stream.h>

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

// The server side of an AsyncPacketStream: the call's context and stream, its four operations,
// and what its end needs to know to count stream errors (an abort of our own is not one; a
// failed write's packet type). The derived class requests the call (its service's Request*
// with call_->ctx and call_->stream) right after prepare_request().
template <class Derived>
class AsyncServerStream : public AsyncPacketStream<Derived> {
 protected:
  struct Call {
    grpc::ServerContext ctx;
    grpc::ServerAsyncReaderWriter<Packet, Packet> stream{&ctx};
  };

  // Before the call is requested: counts it in `live` (removed by the derived class once the
  // request failed or the call is over) and arms its holds (the finish, and the done
  // notification, asked for here). Counted now, not on arrival: the done notification may
  // complete on another thread before the arrival is handled.
  void prepare_request(LiveCalls& live) {
    live.add();
    this->arm(2);
    call_->ctx.AsyncNotifyWhenDone(this->done_tag());
  }

  void start_write_op(const Packet* p, grpc::WriteOptions opts) override {
    call_->stream.Write(*p, opts, this->write_tag());
  }
  void start_read_op(Packet* p) override { call_->stream.Read(p, this->read_tag()); }
  void start_finish_op(const grpc::Status& s) override {
    call_->stream.Finish(s, this->settle_tag());
    this->release_finish_hold();
  }
  void cancel_op(const grpc::Status& status) override {
    cancelled_by_us_ = true;
    cancel_server_call(call_->ctx, status);
  }
  // Counted once the call is over: the async API tells whether it was cancelled only then.
  void on_write_failed(const Packet& p) override { failed_write_type_ = p.type(); }

  // Released by the derived class when the call is over (gRPC's server shutdown waits until
  // every call is released, and the stream object may outlive its call).
  std::unique_ptr<Call> call_ = std::make_unique<Call>();
  std::atomic<bool> cancelled_by_us_{false};  // our own abort: not a stream error
  std::atomic<int> failed_write_type_{-1};    // the packet type of a failed write, if any
};

}  // namespace konn::core::tunnel
