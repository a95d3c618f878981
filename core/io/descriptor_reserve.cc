#include "core/io/descriptor_reserve.h"

#include <algorithm>
#include <array>
#include <memory>
#include <optional>

#include <asio/local/stream_protocol.hpp>

namespace konn::core::io {

DescriptorReserve::Lease DescriptorReserve::take(size_t sockets) {
  std::lock_guard lock(counts_->mu);
  while (counts_->leased + sockets > counts_->reserved) {
    size_t got = reserve_block();
    if (got == 0) break;
    counts_->reserved += got;
  }
  counts_->leased += sockets;
  return Lease(counts_, sockets);
}

size_t DescriptorReserve::leased() const {
  std::lock_guard lock(counts_->mu);
  return counts_->leased;
}

size_t DescriptorReserve::reserved() const {
  std::lock_guard lock(counts_->mu);
  return counts_->reserved;
}

size_t DescriptorReserve::reserve_block() {
  // All open at the same time, so each takes a state of its own; closing them returns the
  // states to the context's pool, where later sockets find them.
  auto block =
      std::make_unique<std::array<std::optional<asio::local::stream_protocol::socket>, kBlock>>();
  size_t opened = 0;
  for (auto& s : *block) {
    std::error_code ec;
    s.emplace(ctx_);
    s->open(asio::local::stream_protocol(), ec);
    if (ec) break;
    ++opened;
  }
  return opened;
}

Awaitable<void> run_leased(Awaitable<void> session, DescriptorReserve::Lease lease) {
  co_await std::move(session);
  lease.reset();
}

}  // namespace konn::core::io
