#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>

#include "core/io/asio_compat.h"
#include "kubeproxy-http/byte_stream.h"

namespace konn::kubeproxy {

struct StreamRelayStats {
  uint64_t downstream_to_upstream = 0;
  uint64_t upstream_to_downstream = 0;
  std::error_code error;  // first error other than EOF, if any
  // One side had finished and nothing moved for the half-close timeout: both were closed.
  bool half_close_timed_out = false;
};

// How long a relay with one side finished sending may go without traffic before both sides are
// closed, unless the caller says otherwise (connect mode: --half-close-timeout).
inline constexpr std::chrono::seconds kDefaultHalfCloseTimeout{30};

// Copies bytes both ways between `downstream` and `upstream` until both directions ended, as
// core/relay does for plain sockets but over any ByteStream (TLS included): one buffer per
// direction and no read before the previous write finished (memory bounded at 2 * buffer_size),
// EOF on one side becomes a half-close of the other, an error closes both. Once one direction
// ended, nothing moving for `half_close_timeout` (> 0; 0: never) closes both: a peer that never
// finishes its side does not hold the relay for good.
// `moved_up` / `moved_down` (may be null) get the bytes of each direction as they move (for
// /status.json).
core::io::Awaitable<StreamRelayStats> relay_streams(
    ByteStream& downstream, ByteStream& upstream, size_t buffer_size = 64 * 1024,
    std::chrono::nanoseconds half_close_timeout = kDefaultHalfCloseTimeout,
    std::atomic<uint64_t>* moved_up = nullptr, std::atomic<uint64_t>* moved_down = nullptr);

// The upgrade exchange after the request was sent upstream: reads the apiserver's answer from
// `upstream`; on 101 Switching Protocols passes the answer (and any bytes after it) to
// `downstream` and relays both ways until both sides closed; on any other answer passes that
// answer through and ends. `error` is set when the apiserver sent nothing usable (the caller then
// answers 502 itself). Returns the answer's status, 0 when none arrived. The relay is bounded as
// relay_streams() with `half_close_timeout` (--half-close-timeout).
struct UpgradeOutcome {
  int status = 0;
  std::string error;
  StreamRelayStats relayed;
};
core::io::Awaitable<UpgradeOutcome> finish_upgrade(
    ByteStream& downstream, ByteStream& upstream,
    std::chrono::nanoseconds half_close_timeout = kDefaultHalfCloseTimeout);

}  // namespace konn::kubeproxy
