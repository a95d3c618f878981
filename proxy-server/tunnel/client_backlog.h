#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

namespace konn::server {

class Backend;
class Frontend;

// One tunnel's DATA from an agent without konn flow control (upstream's) that waits for the
// tunnel's client, counted into its agent's Backend (Backend::client_backlog), which stops
// reading the agent's stream while too much waits. Also remembers when the client last took
// bytes, so the backend can tell a slow client from one that takes nothing at all.
// Thread-safe; the backend is told outside the lock.
class ClientBacklog {
 public:
  using Clock = std::chrono::steady_clock;

  ClientBacklog() = default;
  ClientBacklog(const ClientBacklog&) = delete;
  ClientBacklog& operator=(const ClientBacklog&) = delete;
  // A tunnel that ends on a path that never released (a dial that failed after bind) leaves
  // nothing behind in its backend.
  ~ClientBacklog() { release(); }

  // From now on bytes count towards `backend` (a tunnel established through an agent without
  // flow control), which watches `owner` for a stalled client until release().
  void bind(std::shared_ptr<Backend> backend, std::weak_ptr<Frontend> owner);
  // `n` bytes were queued for the client / taken by the client's side (written or handed to
  // HTTP/2).
  void added(size_t n);
  void taken(size_t n);
  // The tunnel is over: whatever still waits no longer holds the agent. Idempotent.
  void release();
  // How long the client has taken nothing while bytes waited (zero when nothing waits).
  Clock::duration stalled_for(Clock::time_point now) const;
  int64_t waiting() const;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<Backend> backend_;  // null: not counting (bound later, or released)
  int64_t waiting_ = 0;
  Clock::time_point since_{};  // when the client last took bytes, or when bytes began to wait
};

}  // namespace konn::server
