#include "core/io/allocator.h"

#include <atomic>
#include <malloc.h>
#include <memory>
#include <optional>
#include <time.h>

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

// Looking at the heap (mallinfo2, malloc_trim) walks every free chunk: with 2 000 agents on a
// server, a few milliseconds. A process that has used less CPU than this since the last look
// has freed next to nothing, so it does not look again, except once in kLookAtLeastEvery.
constexpr std::chrono::milliseconds kWorkWorthALook{5};
constexpr std::chrono::seconds kLookAtLeastEvery{60};

std::atomic<uint64_t> g_walks{0};

std::chrono::nanoseconds process_cpu() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

Awaitable<void> trim_loop(std::chrono::milliseconds period, size_t slack) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  auto cpu_after_look = process_cpu();
  std::optional<std::chrono::steady_clock::time_point> last_look;  // none yet: the first looks
  for (;;) {
    timer.expires_after(period);
    auto [ec] = co_await timer.async_wait(use_nothrow);
    if (ec) co_return;
    const auto now = std::chrono::steady_clock::now();
    const bool worked = process_cpu() - cpu_after_look >= kWorkWorthALook;
    if (!worked && last_look && now - *last_look < kLookAtLeastEvery) continue;
    g_walks.fetch_add(1, std::memory_order_relaxed);
    if (free_heap_bytes() > slack) malloc_trim(0);
    last_look = now;
    cpu_after_look = process_cpu();  // the look's own cost is not work
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

uint64_t memory_trimmer_walks() { return g_walks.load(std::memory_order_relaxed); }

size_t free_heap_bytes() {
  struct mallinfo2 m = mallinfo2();
  return m.fordblks;
}

void start_memory_trimmer(asio::io_context& ctx, std::chrono::milliseconds period, size_t slack) {
  asio::co_spawn(ctx, trim_loop(period, slack), asio::detached);
}

}  // namespace konn::core::io
