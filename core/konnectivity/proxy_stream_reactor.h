#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include <grpcpp/client_context.h>
#include <grpcpp/support/client_callback.h>

#include "core/tunnel/packet_stream.h"
#include "konnectivity/client.grpc.pb.h"

namespace konn::core::konnectivity {

// What one Proxy stream reports to its tunnel. Both run on gRPC threads and must not block: they
// account and post to the tunnel's io_context.
class StreamEvents {
 public:
  virtual ~StreamEvents() = default;
  // A packet arrived. `stream` is the stream it came on (for read flow control).
  virtual void on_packet(tunnel::PacketStream& stream, Packet&& p) = 0;
  // The call is over (OnDone); called once, as the stream's last act towards the tunnel.
  virtual void on_stream_end(const grpc::Status& status) = 0;
};

// Every stream a Dialer started and that has not finished, so the Dialer can cancel them and wait
// for their OnDone before its channel goes away. Thread-safe (one mutex).
class StreamTracker {
 public:
  void add(const std::weak_ptr<tunnel::PacketStream>& s);
  void done();
  // Cancels every live stream and waits (up to `timeout`) until each has finished.
  void cancel_all(std::chrono::milliseconds timeout);
  size_t active() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::weak_ptr<tunnel::PacketStream>> streams_;  // pruned on add
  size_t active_ = 0;
};

// The client side of one `/ProxyService/Proxy` stream, carrying one tunnel (STYLE rule 7 through
// PacketStream: one write and one read in flight, the finish operation once). Reads and writes
// are started from Asio threads, so a hold is added before StartCall and removed by the finish
// operation (StartWritesDone + RemoveHold).
//
// Lifetime: start() returns a shared_ptr and the reactor holds itself until OnDone; it holds its
// StreamEvents until OnDone too, and then drops it.
class ProxyStreamReactor final : public grpc::ClientBidiReactor<Packet, Packet>,
                                 public tunnel::PacketStream {
 public:
  struct Private {};
  ProxyStreamReactor(Private, std::shared_ptr<StreamEvents> events,
                     std::shared_ptr<StreamTracker> tracker);

  // Opens the call on `stub` and starts reading.
  static std::shared_ptr<ProxyStreamReactor> start(ProxyService::Stub& stub,
                                                   std::shared_ptr<StreamEvents> events,
                                                   std::shared_ptr<StreamTracker> tracker);

  void OnReadDone(bool ok) override { handle_read_done(ok); }
  void OnWriteDone(bool ok) override { handle_write_done(ok); }
  void OnDone(const grpc::Status& status) override;

 protected:
  void start_write_op(const Packet* p, tunnel::WriteOptions opts) override {
    StartWrite(p, opts.buffer_hint ? grpc::WriteOptions().set_buffer_hint() : grpc::WriteOptions());
  }
  void start_read_op(Packet* p) override { StartRead(p); }
  void start_finish_op(const h2::GrpcStatus& status) override;
  // A client call has no status of its own to send: cancelling is all it can do.
  void cancel_op(const h2::GrpcStatus& /*status*/) override { context_.TryCancel(); }
  void on_packet(Packet&& p) override;
  void on_read_end() override;

 private:
  grpc::ClientContext context_;
  std::shared_ptr<StreamEvents> events_;  // until OnDone
  std::shared_ptr<StreamTracker> tracker_;
  std::shared_ptr<ProxyStreamReactor> self_;  // until OnDone
};

}  // namespace konn::core::konnectivity
