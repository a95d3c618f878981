#pragma once

#include <cstdint>
#include <vector>

#include <asio/ip/tcp.hpp>

#include "core/io/asio_compat.h"

namespace konn::core::relay {

struct RelayStats {
  uint64_t downstream_to_upstream = 0;  // bytes read from `downstream`, written to `upstream`
  uint64_t upstream_to_downstream = 0;
  std::error_code downstream_error;     // first error other than EOF, if any
  std::error_code upstream_error;
};

// Copies bytes both ways between two connected sockets until both directions have ended.
// Each direction owns one buffer of `buffer_size` bytes and never reads again before the previous
// write completed, so memory is bounded at 2 * buffer_size. EOF on one side becomes
// shutdown(send) on the other (half-close); the other direction continues. An error on either
// side closes both sockets. Works for tcp::socket and local::stream_protocol::socket.
template <typename A, typename B>
io::Awaitable<RelayStats> relay(A& downstream, B& upstream, size_t buffer_size = 16 * 1024);

}  // namespace konn::core::relay

#include "core/relay/relay_impl.h"
