#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/h2/grpc_status.h"
#include "core/h2/idle_free_queue.h"
#include "core/relay/read_gate.h"
#include "core/tunnel/packet.h"
#include "konnectivity/client.pb.h"

namespace konn::core::tunnel {

// Told when a queued packet has been handed to the transport (its bytes left our queue), so the
// tunnel that produced it can resume reading. Called on the stream's thread (below), with no lock
// of the stream held.
class WriteListener {
 public:
  virtual ~WriteListener() = default;
  virtual void on_written(size_t data_bytes) = 0;
};

// How one write goes out.
struct WriteOptions {
  // More packets wait behind this one: the transport may hold it back to send them together
  // (gRPC C++: WriteOptions::set_buffer_hint). Not set when nothing waits, so latency is kept.
  bool buffer_hint = false;
};

// The transport-independent half of one gRPC bidi stream of Packets (server or client side).
// It owns the rules every such stream must keep (STYLE rule 7):
//   - at most one write outstanding (start_write_op); the Packet being written lives until
//     handle_write_done; buffer_hint is set while more output waits; pending DATA for the same
//     tunnel is merged into one packet (up to kCoalesceLimit);
//   - waiting packets are kept per tunnel (connectID) and the tunnels take turns, one packet
//     each, so a tunnel's few bytes wait behind at most one packet of each busy tunnel, never
//     behind a whole window of another's (head-of-line blocking on a stream that many tunnels
//     share). Packets that belong to no tunnel yet (dials), or that only return credit, go
//     before any DATA. A tunnel's own packets keep their order;
//   - at most one read outstanding (start_read_op); the next starts only after on_packet()
//     returned and while the read gate is open;
//   - the finish operation (a server's status, a client's half-close) is issued exactly once,
//     only when no write is in flight and no *_op call is executing on another thread.
// The stream's status (close, the finish and cancel operations) is an h2::GrpcStatus whatever
// the transport. All public methods are thread-safe. The implementation calls the handle_*
// methods from its transport's completions.
//
// The stream's thread: the worker its core/h2 connection lives on (the server's H2ServerStream,
// the agent's ServerStreamReactor).
//
// Lifetime: the reactor holds a shared_ptr to itself until OnDone; anyone else keeps a
// shared_ptr (never a raw pointer), and every method is safe after the stream finished: send()
// then returns false.
class PacketStream : public std::enable_shared_from_this<PacketStream> {
 public:
  virtual ~PacketStream() = default;
  PacketStream(const PacketStream&) = delete;
  PacketStream& operator=(const PacketStream&) = delete;

  // Queues `p` for writing. `listener` (may be null) hears when its DATA bytes left the queue.
  // Returns false when the stream is closing and the packet was dropped.
  bool send(Packet&& p, std::shared_ptr<WriteListener> listener = nullptr);

  // Stops accepting packets and ends the stream with `status` (OK when not given) once queued
  // packets are written. With `abort`, queued packets are dropped and the call is cancelled at
  // once (a peer that does not read cannot hold us). The first call's status wins, except that an
  // abort replaces the status of an earlier graceful close whose finish was not issued yet.
  // Idempotent.
  void close(const h2::GrpcStatus& status = {}, bool abort = false);

  // Read-side flow control: a paused stream starts no new read until every reason is cleared.
  void pause_reading(relay::PauseReason reason);
  void resume_reading(relay::PauseReason reason);

  bool closing() const;
  // OnDone ran (mark_done): the call is over.
  bool done() const;
  // Bytes of DATA waiting in (or being written from) the outbound queue. Lock-free (a relaxed
  // read of a count kept under the stream's lock): cheap enough to read per dial.
  size_t queued_bytes() const;

 protected:
  PacketStream() = default;

  // The reactor plugs these into its callbacks.
  void handle_write_done(bool ok);
  void handle_read_done(bool ok);
  // Starts the first read; later reads follow automatically.
  void start_reading();
  // Call from OnDone, before dropping the self reference.
  void mark_done();
  // Waiting DATA of one tunnel is merged up to this many bytes (kCoalesceLimit until set); a
  // transport lowers it to what it sends whole (H2ServerStream). Any thread.
  void set_coalesce_limit(size_t bytes) { coalesce_limit_.store(bytes, std::memory_order_relaxed); }

  // Implemented by the reactor; called with no lock held, never after the finish operation.
  virtual void start_write_op(const Packet* p, WriteOptions opts) = 0;
  virtual void start_read_op(Packet* p) = 0;
  virtual void start_finish_op(const h2::GrpcStatus& status) = 0;
  // Cancels the call; `status` is the close status (a server sends it to the client as the
  // call's status where the transport allows, rather than a bare CANCELLED).
  virtual void cancel_op(const h2::GrpcStatus& status) = 0;
  // A packet arrived. Runs on the stream's thread; reads are serialized, so at most one runs at a
  // time for this stream. It may call send() or close() on this or other streams.
  virtual void on_packet(Packet&& p) = 0;
  // The read side ended: the peer finished or the stream broke (`ok` false means broken).
  virtual void on_read_end() = 0;
  // A packet was accepted by send() (for metrics). Called with no lock held, before queueing.
  virtual void on_queued(const Packet& /*p*/) {}
  // Writing `p` failed: the stream broke (for metrics). Called once per stream, no lock held.
  virtual void on_write_failed(const Packet& /*p*/) {}

 private:
  struct Item {
    Packet packet;
    std::shared_ptr<WriteListener> listener;
    size_t bytes = 0;
  };
  enum class Action { None, Write, Finish };

  // Decides, under the lock, what to start next; the caller performs it unlocked.
  Action next_action_locked(const Packet** write, WriteOptions* opts);
  void run(Action a, const Packet* write, WriteOptions opts);
  void maybe_start_read();
  // Moves the next packet to write into in_flight_: the control queue first, then the next
  // tunnel in turn.
  void take_next_locked();
  bool waiting_locked() const { return !control_.empty() || !turns_.empty(); }
  void drop_waiting_locked();
  // queued_bytes_ += delta; only under mu_ (one writer at a time), read without it. A negative
  // delta wraps around as unsigned arithmetic does, to the right count.
  void add_queued_locked(int64_t delta) {
    queued_bytes_.store(queued_bytes_.load(std::memory_order_relaxed) + static_cast<size_t>(delta),
                        std::memory_order_relaxed);
  }

  mutable std::mutex mu_;
  // Waiting packets. Dials, dial answers with an error, credit and drain wait in control_ (as
  // does, for an instant, a packet sent while nothing waits); a tunnel's in its lane. Lanes exist
  // while they hold packets, in the order they will be served; an idle stream allocates none
  // (nor does its empty control queue: an agent's stream lives as long as the agent).
  using Queue = h2::IdleFreeQueue<Item>;
  struct Lane {
    int64_t tunnel;
    Queue items;
  };
  Queue control_;
  std::list<Lane> turns_;
  std::unordered_map<int64_t, std::list<Lane>::iterator> lanes_;
  Item in_flight_;                       // being written while writing_
  std::atomic<size_t> queued_bytes_{0};  // DATA bytes waiting or in flight
  bool writing_ = false;
  bool reading_ = false;
  bool read_ended_ = false;
  bool read_started_ = false;
  relay::ReadGate gate_;
  bool closing_ = false;
  bool aborted_ = false;
  bool finished_ = false;  // finish op issued
  bool done_ = false;      // OnDone ran
  int starting_ = 0;       // Start*/cancel calls executing outside the lock
  h2::GrpcStatus status_;
  Packet in_;  // target of the outstanding read
  std::atomic<size_t> coalesce_limit_{kCoalesceLimit};
};

}  // namespace konn::core::tunnel
