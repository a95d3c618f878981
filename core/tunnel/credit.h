#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/tunnel/packet.h"

namespace konn::core::tunnel {

// The receiving side of konn's per-tunnel credit (KONN_WINDOW_UPDATE): counts the bytes of one
// tunnel and direction that left for their socket, and says when to hand them back to the
// sender. Credit goes back in batches of at least kWindowUpdateThreshold bytes, not per packet.
//
// Two threads may count at once (a socket's worker, and a direct write from the thread of the
// stream that delivered the packet: WriteRole):
// whoever crosses the threshold takes everything counted so far, and the other finds little
// or nothing left.
class CreditReturn {
 public:
  // Counts `bytes` written; returns the credit to send back now in one WindowUpdate, or 0.
  int64_t written(size_t bytes) {
    auto add = static_cast<int64_t>(bytes);
    if (unacked_.fetch_add(add, std::memory_order_relaxed) + add < kWindowUpdateThreshold) {
      return 0;
    }
    return unacked_.exchange(0, std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> unacked_{0};
};

}  // namespace konn::core::tunnel
