#pragma once

#include <chrono>
#include <cstdint>

#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>

#include "core/io/asio_compat.h"
#include "core/relay/relay.h"

namespace konn::socks5 {

// Last time bytes moved, shared by both directions of a relay (for the idle timeout).
struct Activity {
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  void touch() { last = std::chrono::steady_clock::now(); }
};

// Moves bytes between two plain TCP sockets with splice(2) through a pipe per direction, so the
// payload never enters user space. Same contract as core::relay::relay(): each direction ends
// at EOF with shutdown(send) on the other socket (half-close), an error on either side closes
// both, and the call returns when both directions are done. A pipe holds at most `pipe_bytes`
// in flight per direction (bounded memory); a direction takes a pipe (from a small per-thread
// cache) when bytes arrive and gives it back whenever the source goes quiet with the pipe empty,
// so an idle session holds no pipe.
//
// Linux only. Sockets are switched to non-blocking mode. `Upstream` is a TCP socket or a unix
// stream socket (an HTTP CONNECT tunnel through a proxy-server's unix socket).
template <typename Upstream>
core::io::Awaitable<core::relay::RelayStats> splice_relay(asio::ip::tcp::socket& downstream,
                                                          Upstream& upstream, Activity& activity,
                                                          size_t pipe_bytes = 1024 * 1024);

}  // namespace konn::socks5
