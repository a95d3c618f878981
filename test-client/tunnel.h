#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/sync_stream.h>

#include "konnectivity/client.grpc.pb.h"
#include "test-client/byte_stream.h"

namespace konn::testclient {

// One tunnel through a proxy-server frontend: one `/ProxyService/Proxy` stream carrying one
// dialled connection, driven the way konnectivity-client drives it (DIAL_REQ → DIAL_RSP → DATA …
// → CLOSE_REQ → CLOSE_RSP).
//
// Threads: a private reader thread reads the stream and queues received bytes (up to
// kInboxLimit; beyond that it stops reading, so HTTP/2 flow control pushes back on the server).
// write() and close() may run on one thread while read() runs on another; two concurrent
// writers are serialised.
class Tunnel final : public ByteStream {
 public:
  // Largest DATA payload write() sends.
  static constexpr size_t kMaxChunk = 256 * 1024;
  // Received bytes held for read() before the reader thread stops taking packets from gRPC.
  static constexpr size_t kInboxLimit = 8 * 1024 * 1024;

  struct DialResult {
    std::unique_ptr<Tunnel> tunnel;  // set when the dial succeeded
    std::string error;               // otherwise: the agent's DIAL_RSP error text, or why it failed
  };

  // Opens a stream on `channel` and dials `address` ("host:port") with
  // DIAL_REQ{protocol "tcp", random = a fresh non-negative dialID}. Waits up to `timeout` for the
  // DIAL_RSP; on timeout sends DIAL_CLS and gives up ("dial timeout ..."). Never throws.
  static DialResult dial(const std::shared_ptr<grpc::Channel>& channel, const std::string& address,
                         std::chrono::milliseconds timeout);

  // Cancels the stream if it is still open (without CLOSE_REQ; use close() for a clean end) and
  // joins the reader thread.
  ~Tunnel() override;

  int64_t connect_id() const { return connect_id_; }
  int64_t dial_id() const { return dial_id_; }

  // Sends `bytes` as DATA packets of at most kMaxChunk. Blocks while HTTP/2 flow control holds
  // the stream. Returns false when the tunnel ended (EOF seen or stream broken) or was closed.
  bool write(std::string_view bytes) override;

  // The protocol has no half-close: nothing is sent (returns false); the destination learns that
  // we are done only from close()'s CLOSE_REQ.
  bool close_write() override { return false; }

  // The next received bytes, in order; nullopt once the tunnel ended (CLOSE_RSP, DIAL_CLS or the
  // stream ended) and everything before that was read. Blocks.
  std::optional<std::string> read() override;
  // As read(), giving up after `timeout`. On Data, `*out` holds the bytes.
  ReadStatus read_for(std::string* out, std::chrono::milliseconds timeout) override;

  // Sends CLOSE_REQ and waits (up to `timeout` in all) for CLOSE_RSP, then ends the stream
  // (half-close, or cancel if the server does not finish it in time). Received bytes not yet
  // read are discarded. Returns "" on a clean close, else what went wrong (CLOSE_RSP error text,
  // "no CLOSE_RSP within ...", "stream ended: ..."). Idempotent: later calls return the first
  // result.
  std::string close(std::chrono::milliseconds timeout = std::chrono::seconds(5)) override;

  // Whether the tunnel ended (from the far side or the stream), and why: "" for a CLOSE_RSP
  // without error, its error text otherwise, "stream ended: <status>" for a broken stream.
  bool ended() const override;
  std::string end_reason() const override;
  // The gRPC status the stream finished with (OK until it finished).
  grpc::Status status() const;

  uint64_t bytes_sent() const { return sent_.load(); }
  uint64_t bytes_received() const { return received_.load(); }

 private:
  struct Private {};

 public:
  // Use dial().
  Tunnel(Private, const std::shared_ptr<grpc::Channel>& channel, int64_t dial_id);

 private:
  enum class DialState { Pending, Established, Failed };

  void run_stream(std::string address);
  // `more`: another packet follows at once, so gRPC may hold this one to batch them.
  bool write_packet(const Packet& p, std::chrono::steady_clock::time_point deadline,
                    bool more = false);
  void end_stream(std::chrono::steady_clock::time_point deadline);

  std::unique_ptr<ProxyService::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<Packet, Packet>> stream_;  // set by run_stream
  const int64_t dial_id_;
  int64_t connect_id_ = 0;
  std::thread reader_;

  // One writer at a time (a gRPC sync stream allows one); timed, so close() cannot hang behind a
  // write that flow control holds forever.
  std::timed_mutex write_mu_;
  bool write_failed_ = false;  // guarded by write_mu_
  bool writes_done_ = false;   // guarded by write_mu_

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool stream_created_ = false;
  DialState dial_state_ = DialState::Pending;
  std::string dial_error_;
  std::deque<std::string> inbox_;
  size_t inbox_bytes_ = 0;
  bool ended_ = false;            // CLOSE_RSP / DIAL_CLS received or the stream ended
  bool stream_finished_ = false;  // Read returned false and Finish() ran
  bool discard_ = false;          // close() or destruction: drop data instead of queueing it
  bool closed_ = false;           // close() was called
  std::string close_result_;
  std::string end_reason_;
  grpc::Status status_;

  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> received_{0};
};

}  // namespace konn::testclient
