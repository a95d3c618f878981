#pragma once

#include <cstdint>

namespace konn::core::relay {

// Why a producer is not reading. Independent blockers compose: reading resumes only when every
// reason is cleared (nghttpx's IOCtrlReason bits; Envoy's counted readDisable).
enum class PauseReason : uint8_t {
  QueueFull = 1 << 0,      // our own queue towards the consumer passed its high watermark
  NoCredit = 1 << 1,       // the peer's flow-control window is exhausted
  Dialing = 1 << 2,        // the other side is not connected yet
  Shutdown = 1 << 3,       // the stream is closing
  ClientsBehind = 1 << 4,  // an agent without flow control: too much of its DATA waits for clients
};

// Not thread-safe: owned by one connection, used under its executor or lock.
class ReadGate {
 public:
  // Returns true when this call closed an open gate (the caller counts a pause).
  bool pause(PauseReason r) {
    bool was_open = bits_ == 0;
    bits_ |= static_cast<uint8_t>(r);
    return was_open;
  }
  // Returns true when this call opened the gate (the caller resumes reading and counts it).
  bool resume(PauseReason r) {
    bool was_closed = bits_ != 0;
    bits_ &= static_cast<uint8_t>(~static_cast<uint8_t>(r));
    return was_closed && bits_ == 0;
  }
  bool open() const { return bits_ == 0; }
  bool paused_for(PauseReason r) const { return (bits_ & static_cast<uint8_t>(r)) != 0; }

 private:
  uint8_t bits_ = 0;
};

}  // namespace konn::core::relay
