#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>

#include <asio/io_context.hpp>

#include "core/io/asio_compat.h"

namespace konn::core::io {

// Keeps the memory of many short-lived connections returnable to the system.
//
// Asio gives every socket registered with an io_context a small state object (168 bytes), taken
// from a pool that grows to the most sockets ever open at once and is never freed. Allocated one
// at a time, amid each connection's own allocations, those states end up spread over the heap,
// one every page or so. Once a burst of connections closes, each surviving state keeps its page
// resident: 10 000 CONNECT tunnels left the server and the agent 25-30 MiB above their idle size.
//
// A DescriptorReserve grows its context's pool ahead of need, in blocks of contiguous states: a
// block is allocated by opening kBlock sockets at once and closing them. Connections take a
// Lease for the sockets they will register on the context, before they register them; when the
// leases would pass what was reserved, another block is reserved first. The same 10 000 tunnels
// then leave 3.5-5 MiB behind. The cost is at most one block of states per context beyond the
// peak (45 KiB), and kBlock file descriptors held for the microseconds a block takes.
//
// Thread-safe: Asio locks socket registration, so a block may be reserved from any thread.
class DescriptorReserve {
 public:
  static constexpr size_t kBlock = 256;

  explicit DescriptorReserve(asio::io_context& ctx)
      : ctx_(ctx), counts_(std::make_shared<Counts>()) {}
  DescriptorReserve(const DescriptorReserve&) = delete;
  DescriptorReserve& operator=(const DescriptorReserve&) = delete;

 private:
  struct Counts {
    std::mutex mu;
    size_t leased = 0;
    size_t reserved = 0;
  };

 public:
  // Held by a connection for as long as its sockets may be registered; returns them when
  // destroyed. Move-only. A default-constructed Lease holds nothing. It shares the counts, so it
  // may outlive the DescriptorReserve (a connection released late at shutdown).
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&&) noexcept = default;
    Lease& operator=(Lease&& o) noexcept {
      if (this != &o) {
        reset();
        counts_ = std::move(o.counts_);
        sockets_ = o.sockets_;
      }
      return *this;
    }
    ~Lease() { reset(); }
    void reset() {
      if (!counts_) return;
      {
        std::lock_guard lock(counts_->mu);
        counts_->leased -= std::min(counts_->leased, sockets_);
      }
      counts_.reset();
    }

   private:
    friend class DescriptorReserve;
    Lease(std::shared_ptr<Counts> counts, size_t sockets)
        : counts_(std::move(counts)), sockets_(sockets) {}
    std::shared_ptr<Counts> counts_;
    size_t sockets_ = 0;
  };

  // Leases `sockets` states, reserving another block first when needed. When a block cannot be
  // reserved (out of file descriptors), the lease is granted anyway: Asio then allocates as it
  // would have.
  Lease take(size_t sockets = 1);

  size_t leased() const;
  size_t reserved() const;

 private:
  // Opens up to kBlock sockets on ctx_ at once and closes them; returns how many it opened.
  size_t reserve_block();

  asio::io_context& ctx_;
  std::shared_ptr<Counts> counts_;
};

// Runs `session` holding `lease` (its sockets' descriptor states) until it ends: for
// co_spawn'ing a connection's coroutine with its lease.
Awaitable<void> run_leased(Awaitable<void> session, DescriptorReserve::Lease lease);

}  // namespace konn::core::io
