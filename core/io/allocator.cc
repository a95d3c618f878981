#include "core/io/allocator.h"

#include <malloc.h>
#include <memory>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>

#include "core/io/asio_compat.h"

namespace konn::core::io {

namespace {
// Larger than any buffer we allocate (kCoalesceLimit, 1 MiB; the splice pipes are kernel memory).
constexpr int kMmapThreshold = 32 << 20;
// free() alone gives back only what exceeds this at the heap's top; the trimmer does the rest.
// (Lower, the top shrinks and grows with every burst: at 4 MiB a tunnel ran at half speed.)
constexpr int kTrimThreshold = 128 << 20;

Awaitable<void> trim_loop(std::chrono::milliseconds period, size_t slack) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    timer.expires_after(period);
    auto [ec] = co_await timer.async_wait(use_nothrow);
    if (ec) co_return;
    if (free_heap_bytes() > slack) malloc_trim(0);
  }
}
}  // namespace

void tune_allocator_for_relaying() {
  mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
  mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
  // One arena: malloc_trim gives back a thread arena's free chunks but never its top, which
  // only free() past kTrimThreshold shrinks, and a thread heap (64 MiB) never gets that far.
  // With every thread in the main arena the trimmer reaches everything. Two cores, a handful
  // of threads and per-thread caches for small sizes keep the shared lock cheap (measured: the
  // same CPU per GiB as with per-thread arenas).
  mallopt(M_ARENA_MAX, 1);
}

size_t free_heap_bytes() {
  struct mallinfo2 m = mallinfo2();
  return m.fordblks;
}

void start_memory_trimmer(asio::io_context& ctx, std::chrono::milliseconds period, size_t slack) {
  asio::co_spawn(ctx, trim_loop(period, slack), asio::detached);
}

}  // namespace konn::core::io
