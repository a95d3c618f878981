#pragma once

#include <cstddef>
#include <mutex>
#include <string_view>

namespace konn::core::relay {

// The largest packet a delivering thread writes itself: round trips are small, and a bulk
// transfer's large packets keep the owner's thread (and its parallelism) for the copy.
inline constexpr size_t kDirectWriteMax = 64 * 1024;

// Who writes a socket whose bytes arrive from outside its own loop (a tunnel's packets, delivered
// by the worker of the HTTP/2 connection that carries their stream to a socket that lives on its
// own worker: another thread for the server's CONNECT clients and dials for agents, usually the
// same thread for the agent's endpoints).
//
// The socket's own executor (its "owner") queues and writes, one write in flight. While its queue
// is empty, nothing is in flight and no delivery is on its way to it, the owner may open the role:
// the delivering thread then writes a packet itself, with one non-blocking send(2), instead of
// posting it. That saves the owner's wake-up (a context switch) on every small packet, which is
// most of what a request/response round trip costs. The first packet that cannot go out whole
// (the socket is full, too large, an error) closes the role again and goes to the owner, with
// every later packet behind it, so bytes keep their order.
//
// Invariants:
// - Only one delivering thread per socket (a tunnel's packets come from one stream).
// - Deliveries that went to the owner are counted until it takes them (arrived()); the role
//   cannot open while one is on its way.
// - close() returns once no direct write is in progress: the owner calls it before it queues
//   anything of its own, shuts down or closes the socket (so a descriptor is never written after
//   it was closed and reused).
// - What the writer counts after a direct write (bytes, flow-control credit) must be safe against
//   the owner counting its own writes at the same time: atomics.
class WriteRole {
 public:
  struct Result {
    size_t written = 0;  // bytes that went out directly
    bool post = false;   // the rest (possibly all) must be posted to the owner, exactly once
  };

  // Delivering thread. Writes `bytes` straight to the socket when the role is open and the
  // packet is at most `max_direct` bytes; otherwise (or for what did not fit) asks for a post.
  Result deliver(std::string_view bytes, size_t max_direct);

  // Owner: a posted delivery arrived (whether it is kept or dropped).
  void arrived();
  // Owner: nothing is queued or in flight on `fd`; open the role unless a delivery is still on
  // its way (the owner calls again once it has written that one).
  void open(int fd);
  // Owner: take the role back; waits for a direct write in progress.
  void close();

 private:
  std::mutex mu_;
  int fd_ = -1;  // valid while open_
  bool open_ = false;
  size_t posted_ = 0;  // deliveries posted to the owner and not yet arrived
};

}  // namespace konn::core::relay
