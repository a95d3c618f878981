#pragma once

#include <algorithm>
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
#include "core/konnectivity/proxy_connections.h"
#include "core/tunnel/packet.h"

namespace konn::core::konnectivity {

// One tunnel through a proxy-server's gRPC frontend: one `/ProxyService/Proxy` call on a
// core/h2 connection of ProxyConnections, dialled the way konnectivity-client does it (DIAL_REQ
// with a random non-negative dial id → DIAL_RSP → DATA both ways → CLOSE_REQ/CLOSE_RSP; DIAL_CLS
// when the dial times out), bridged to Asio.
//
// To Asio it is a stream socket: async_read_some/async_write_some with any completion token,
// shutdown(), close(), so core/relay and asio::async_write work on it. Everything runs on the
// tunnel's executor (the one dial() ran on), which is also its connection's thread: a packet is
// handled inline as the connection reads it, and a pending read completes from there (through
// that executor's queue, never on another thread).
//
// Bounded buffering, both ways:
//  - received DATA waits for the reader in an inbox; past kInboxHigh bytes the call's reading
//    pauses until the reader took it below kInboxLow (its HTTP/2 window is then not given back,
//    and the proxy-server stops);
//  - a write completes once its bytes are queued on the call, unless more than kOutboxHigh bytes
//    are queued there and not yet taken by HTTP/2: then it completes when HTTP/2 took them all.
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
  static constexpr size_t kMaxWrite = 1024 * 1024;  // bytes one async_write_some takes
  // After CLOSE_REQ (or DIAL_CLS, or our half-close of the call), how long the proxy-server has
  // to end the call before it is cancelled (konnectivity-client waits 10 s for CLOSE_RSP too).
  static constexpr std::chrono::seconds kCloseWait{10};

  struct DialOutcome {
    std::unique_ptr<GrpcTunnel> tunnel;  // set on success
    DialError error;
  };

  // Starts a call on `connections` (this thread's connection, made first when there is none) and
  // dials `address` ("host:port"). Waits up to `timeout` for the DIAL_RSP; on timeout sends
  // DIAL_CLS and fails with DialFailure::Timeout. Runs on (and binds the tunnel to) the calling
  // coroutine's executor, which must be one thread.
  static io::Awaitable<DialOutcome> dial(ProxyConnections& connections, std::string address,
                                         std::chrono::milliseconds timeout);

  // Closes the tunnel (close()); the call ends in the background.
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
          // Exception to the no-copy rule: the relay reuses its buffer, so the bytes are copied
          // once, here, behind the DATA packet's head; the call sends that message as it is.
          const size_t n = std::min(asio::buffer_size(bufs), kMaxWrite);
          std::string framed = tunnel::frame_data_head(connect_id(), n);
          size_t left = n;
          for (auto it = asio::buffer_sequence_begin(bufs);
               left > 0 && it != asio::buffer_sequence_end(bufs); ++it) {
            asio::const_buffer b(*it);
            const size_t take = std::min(left, b.size());
            framed.append(static_cast<const char*>(b.data()), take);
            left -= take;
          }
          start_write(std::move(framed), n, Completion(std::move(handler), get_executor()));
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
  // `framed`: one DATA message (frame_data_head) carrying `n` payload bytes.
  void start_write(std::string framed, size_t n, Completion done);

  std::shared_ptr<Core> core_;
};

}  // namespace konn::core::konnectivity
