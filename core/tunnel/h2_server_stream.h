#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include "core/h2/connection.h"
#include "core/tunnel/packet_stream.h"

namespace konn::core::tunnel {

// The server side of one gRPC bidi stream of Packets on a core/h2 Connection (ProxyService/Proxy,
// AgentService/Connect): PacketStream's rules over an h2::Stream.
//
// Threads: the connection lives on one thread (its home, a worker of the listener's pool), and
// every operation on the call runs there. A write, read, finish or cancel asked for on another
// thread (a tunnel whose other end lives elsewhere, a timer) is posted home; asked for at home it
// runs inline, so a packet from a connection on the same worker is handed over without a post.
//
//  - A write is outstanding until HTTP/2 took its bytes (Stream::set_on_drained), so
//    PacketStream's turn-taking across tunnels decides what goes next, and a peer that stops
//    reading holds only its window.
//  - Messages are parsed and delivered inline while a read is outstanding. One that arrives while
//    none is (reading paused) is held, the h2 stream is paused, and HTTP/2 flow control holds the
//    rest back. The peer's half-close ends the read side.
//  - A message that is not a Packet ends the call with INTERNAL.
//  - The finish operation sends the status in trailers once the queued messages are out; a cancel
//    (PacketStream::close with abort) drops what waits and sends its status at once
//    (h2::Stream::abort), so a peer that stopped reading still learns why.
//
// call_over() runs once, on the home thread, when the call is over: the stream ended and the
// finish operation was issued. The derived class calls mark_done() there.
//
// Lifetime: the derived class keeps a shared_ptr to itself until call_over (as it did for gRPC
// C++'s reactors); posted operations hold one too.
class H2ServerStream : public PacketStream {
 public:
  ~H2ServerStream() override = default;

  // The call's id on its connection, and whether the call ended without the status we sent (the
  // peer reset it, or the connection broke): gRPC's ServerContext::IsCancelled().
  int32_t stream_id() const { return stream_id_; }
  bool peer_cancelled() const { return peer_cancelled_.load(); }

 protected:
  H2ServerStream() = default;

  // From the connection's CallHandler, on its home thread: takes the call (sets its callbacks).
  // `home` is the io_context the connection runs on.
  void attach(asio::io_context& home, const std::shared_ptr<h2::Stream>& stream);
  // Response headers with `md`, sent now (else they go with the first message or the status).
  // Any thread.
  void send_headers(h2::Metadata md);
  // The call is over (see above). Home thread.
  virtual void call_over() = 0;

  // PacketStream.
  void start_write_op(const Packet* p, WriteOptions opts) override;
  void start_read_op(Packet* p) override;
  void start_finish_op(const h2::GrpcStatus& status) override;
  void cancel_op(const h2::GrpcStatus& status) override;
  void on_write_failed(const Packet& p) override { failed_write_type_ = p.type(); }

  // Runs `fn` with the connection's writes held (h2::Stream::hold_writes) when called on the home
  // thread, so that the packets and the status it queues leave in one write; elsewhere `fn`
  // simply runs (its operations are posted home one by one).
  template <typename Fn>
  void with_writes_held(Fn&& fn) {
    std::optional<h2::WriteHold> hold;
    if (home_->get_executor().running_in_this_thread() && stream_) {
      hold.emplace(stream_->hold_writes());
    }
    fn();
  }

  // Runs `fn` on the home thread: at once when called there, else posted (holding this).
  template <typename Fn>
  void on_home_thread(Fn&& fn) {
    if (home_->get_executor().running_in_this_thread()) {
      auto keep = shared_from_this();  // fn may end the call, and its owner drop this
      fn();
      return;
    }
    asio::post(*home_, [keep = shared_from_this(), fn = std::forward<Fn>(fn)]() mutable {
      (void)keep;
      fn();
    });
  }

  std::atomic<bool> cancelled_by_us_{false};  // our own abort: not a stream error
  std::atomic<int> failed_write_type_{-1};    // the packet type of a failed write, if any

 private:
  // h2 stream callbacks (home thread).
  void on_message(std::string&& message);
  void on_half_close();
  void on_stream_end(const h2::GrpcStatus& status);
  void write_packet(const Packet* p);
  // Ends the call now with `status` (trailers at once, what waits dropped). Home thread.
  void abort_call(const h2::GrpcStatus& status);
  void fail_read();
  void settle();

  asio::io_context* home_ = nullptr;
  int32_t stream_id_ = 0;
  std::atomic<bool> peer_cancelled_{false};
  // Home thread only.
  std::shared_ptr<h2::Stream> stream_;
  Packet* read_target_ = nullptr;    // the outstanding read's packet
  std::optional<std::string> held_;  // a message that came while no read was outstanding
  bool read_ended_ = false;          // the peer half-closed: reads fail
  bool write_outstanding_ = false;   // a packet handed to the stream, not yet taken by HTTP/2
  bool stream_over_ = false;         // the stream ended
  bool discarding_ = false;          // cancelled: messages still delivered are dropped
  std::optional<int> status_sent_;   // the code we finished or aborted with
  int holds_ = 2;                    // the stream's end and the finish operation
};

}  // namespace konn::core::tunnel
