#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fcntl.h>
#include <functional>

#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>

#include "core/io/asio_compat.h"
#include "core/relay/relay.h"

namespace konn::socks5 {

// Last time bytes moved, shared by both directions of a relay (for the idle timeout), and
// whether one direction already ended at EOF (for the half-close timeout).
struct Activity {
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  bool one_side_finished = false;
  // Called once, when the first direction ends at EOF (its half-close was passed on).
  std::function<void()> on_one_side_finished;
  // Where the bytes moved so far go as they move ([0] up, client to destination; [1] down), for
  // /status.json; null: not counted live.
  std::atomic<uint64_t>* moved[2] = {nullptr, nullptr};
  void touch() { last = std::chrono::steady_clock::now(); }
  void count(int direction, uint64_t n) {
    if (moved[direction] != nullptr) moved[direction]->fetch_add(n, std::memory_order_relaxed);
  }
  void side_finished() {
    if (one_side_finished) return;
    one_side_finished = true;
    if (on_one_side_finished) on_one_side_finished();
  }
};

// Moves bytes between two plain TCP sockets with splice(2) through a pipe per direction, so the
// payload never enters user space. Same contract as core::relay::relay(): each direction ends
// at EOF with shutdown(send) on the other socket (half-close), an error on either side closes
// both, and the call returns when both directions are done. A pipe holds at most `pipe_bytes`
// in flight per direction (bounded memory); a direction takes a pipe (from a small per-thread
// cache) when bytes arrive and gives it back whenever the source goes quiet with the pipe empty,
// so an idle session holds no pipe.
//
// Where splice(2) is not supported (EINVAL or ENOSYS: a kernel, socket type or socket layer such
// as kTLS without splice), a direction goes on with an ordinary read/write copy through a buffer
// instead of failing the session. No byte is lost: a failed socket → pipe splice took nothing
// from the source, and bytes already in the pipe when pipe → socket fails are read back out of
// it. `fallback_errno`, when given, is set to that errno for the caller's log and metric.
//
// Linux only. Sockets are switched to non-blocking mode. `Upstream` is a TCP socket or a unix
// stream socket (an HTTP CONNECT tunnel through a proxy-server's unix socket).
template <typename Upstream>
core::io::Awaitable<core::relay::RelayStats> splice_relay(asio::ip::tcp::socket& downstream,
                                                          Upstream& upstream, Activity& activity,
                                                          size_t pipe_bytes = 1024 * 1024,
                                                          int* fallback_errno = nullptr);

// The splice(2) the relay calls. Tests replace it to force the failures of a system without
// splice support; nullptr restores ::splice. Atomic, but set it while no relay runs.
using SpliceFunction = ssize_t (*)(int fd_in, loff_t* off_in, int fd_out, loff_t* off_out,
                                   size_t len, unsigned int flags);
void set_splice_function_for_testing(SpliceFunction f);

}  // namespace konn::socks5
