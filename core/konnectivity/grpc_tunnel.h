#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/buffer.hpp>
#include <asio/socket_base.hpp>

#include "core/io/asio_compat.h"
#include "core/konnectivity/completion.h"
#include "core/konnectivity/dial_error.h"
#include "konnectivity/client.grpc.pb.h"

namespace konn::core::konnectivity {

class StreamTracker;

// One tunnel through a proxy-server's gRPC frontend: one `/ProxyService/Proxy` stream, dialled
// the way konnectivity-client does it (DIAL_REQ with a random non-negative dial id → DIAL_RSP →
// DATA both ways → CLOSE_REQ/CLOSE_RSP; DIAL_CLS when the dial times out), bridged to Asio.
//
// To Asio it is a stream socket: async_read_some/async_write_some with any completion token,
// shutdown(), close(), so core/relay and asio::async_write work on it. All of those run on the
// tunnel's executor (the one dial() ran on). gRPC reactions never touch the tunnel's state: they
// post to that executor.
//
// Bounded buffering, both ways:
//  - received DATA waits for the reader in an inbox; past kInboxHigh bytes the stream starts no
//    new read until the reader took it below kInboxLow (HTTP/2 flow control then holds the
//    server);
//  - a write completes once its bytes are queued on the stream, unless more than kOutboxHigh
//    bytes are still unwritten by gRPC: then it completes when that drops to kOutboxLow. The
//    stream merges queued DATA into large packets.
//
// Half-close: the DIAL_REQ asks for konn's extension (konnHalfClose). When the agent confirmed
// it, shutdown(send) sends KONN_CLOSE_WRITE and reads continue; otherwise (an upstream agent)
// shutdown(send) closes the tunnel, as upstream's own frontends do on a client EOF. A
// KONN_CLOSE_WRITE from the far side reads as EOF.
class GrpcTunnel {
 public:
  using executor_type = asio::any_io_executor;
  static constexpr size_t kInboxHigh = 4 * 1024 * 1024;
  static constexpr size_t kInboxLow = 1024 * 1024;
  static constexpr size_t kOutboxHigh = 1024 * 1024;
  static constexpr size_t kOutboxLow = 512 * 1024;
  static constexpr size_t kMaxWrite = 1024 * 1024;  // bytes one async_write_some takes
  // After CLOSE_REQ, how long we wait for CLOSE_RSP before cancelling the stream
  // (konnectivity-client waits 10 s too).
  static constexpr std::chrono::seconds kCloseWait{10};

  struct DialOutcome {
    std::unique_ptr<GrpcTunnel> tunnel;  // set on success
    DialError error;
  };

  // Opens a stream on `stub` and dials `address` ("host:port"). Waits up to `timeout` for the
  // DIAL_RSP; on timeout sends DIAL_CLS and fails with DialFailure::Timeout. Runs on (and binds
  // the tunnel to) the calling coroutine's executor. `tracker` may be null.
  static io::Awaitable<DialOutcome> dial(ProxyService::Stub& stub, std::string address,
                                         std::chrono::milliseconds timeout,
                                         std::shared_ptr<StreamTracker> tracker);

  // Closes the tunnel (close()); the stream finishes in the background.
  ~GrpcTunnel();
  GrpcTunnel(const GrpcTunnel&) = delete;
  GrpcTunnel& operator=(const GrpcTunnel&) = delete;

  executor_type get_executor() const;

  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& bufs) {
          asio::mutable_buffer first;
          for (auto it = asio::buffer_sequence_begin(bufs); it != asio::buffer_sequence_end(bufs);
               ++it) {
            if (asio::mutable_buffer(*it).size() > 0) {
              first = *it;
              break;
            }
          }
          start_read(first, Completion(std::move(handler), get_executor()));
        },
        token, buffers);
  }

  template <typename ConstBuffers, typename Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& bufs) {
          // The packet owns its bytes: the caller's buffer is free once the write completes.
          std::string bytes(std::min(asio::buffer_size(bufs), kMaxWrite), '\0');
          asio::buffer_copy(asio::buffer(bytes), bufs);
          start_write(std::move(bytes), Completion(std::move(handler), get_executor()));
        },
        token, buffers);
  }

  // shutdown_send (or both): see the class comment. Never fails.
  void shutdown(asio::socket_base::shutdown_type what, std::error_code& ec);
  // Sends CLOSE_REQ (when established) and completes pending operations with
  // operation_aborted. Idempotent.
  void close(std::error_code& ec);
  bool is_open() const;

  int64_t dial_id() const;
  int64_t connect_id() const;
  bool half_close() const;
  // Why the tunnel ended ("" while open or after a clean CLOSE_RSP).
  std::string end_reason() const;

  class Core;
  explicit GrpcTunnel(std::shared_ptr<Core> core);

 private:
  void start_read(asio::mutable_buffer buf, Completion done);
  void start_write(std::string bytes, Completion done);

  std::shared_ptr<Core> core_;
};

}  // namespace konn::core::konnectivity
