#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <asio/experimental/concurrent_channel.hpp>
#include <grpcpp/client_context.h>
#include <grpcpp/support/client_callback.h>

#include "bench/loadgen/stream.h"
#include "konnectivity/client.grpc.pb.h"

namespace konn::bench {

// One Konnectivity tunnel through the proxy-server's gRPC frontend, driven the way
// konnectivity-client drives it (one ProxyService/Proxy call: DIAL_REQ → DIAL_RSP → DATA … →
// CLOSE_REQ → CLOSE_RSP), on the gRPC callback API so thousands of tunnels need no thread each.
// Announces no konn extension: the server treats it as it treats kube-apiserver.
//
// Threads: reactions run on gRPC's threads and only hand results to thread-safe channels
// (asio concurrent_channel::try_send), which resume the coroutine waiting on its io_context; no
// handler of ours captures `this`, so nothing outlives the tunnel. Received DATA waits in the
// inbox (at most kInboxMessages packets); beyond that no read is started, so HTTP/2 flow control
// pushes back on the server. One write in flight (the Stream contract).
class GrpcTunnel final : public Stream, private grpc::ClientBidiReactor<Packet, Packet> {
 public:
  static constexpr int kInboxMessages = 16;
  // Largest DATA payload write() sends.
  static constexpr size_t kMaxData = 256 * 1024;

  // Opens a call on `stub` and dials `target`; resumes once DIAL_RSP arrived.
  static Awaitable<std::pair<std::unique_ptr<Stream>, std::string>> dial(ProxyService::Stub& stub,
                                                                         const std::string& target);

  // Cancels the call if close() did not end it, and waits for gRPC's OnDone.
  ~GrpcTunnel() override;

  Awaitable<std::pair<std::error_code, size_t>> read_some(asio::mutable_buffer b) override;
  Awaitable<std::error_code> write(asio::const_buffer b) override;
  Awaitable<std::error_code> close() override;
  Awaitable<void> reset() override;

 private:
  using Inbox = asio::experimental::concurrent_channel<void(std::error_code, std::string)>;
  // Exception: Asio 1.22 cannot instantiate a channel of void(error_code) alone (ambiguous
  // channel_traits), so signals carry an unused int.
  using Signal = asio::experimental::concurrent_channel<void(std::error_code, int)>;

  explicit GrpcTunnel(const asio::any_io_executor& ex);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

  // Queues one inbox item (gRPC thread), then reads on unless the inbox is full.
  void deliver(std::error_code ec, std::string bytes, bool read_on);
  // Takes the next inbox item (io thread), restarting a read paused by a full inbox.
  Awaitable<std::pair<std::error_code, std::string>> receive();
  Awaitable<std::error_code> send(const Packet& p);
  void remove_hold_once();

  grpc::ClientContext ctx_;
  Packet in_;
  Packet out_;
  Inbox inbox_;
  Signal write_done_;
  Signal done_signal_;
  std::promise<void> done_;
  std::future<void> done_future_ = done_.get_future();

  std::mutex mu_;  // guards the three fields below (gRPC thread vs io thread)
  int queued_ = 0;
  bool read_paused_ = false;
  bool read_ended_ = false;

  bool hold_removed_ = false;
  bool closed_ = false;
  bool eof_ = false;
  int64_t connect_id_ = 0;
  std::string pending_;
  size_t pending_off_ = 0;
};

}  // namespace konn::bench
