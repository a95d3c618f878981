#include "core/h2/session_memory.h"

#include <atomic>
#include <cstdlib>

#include <nghttp2/nghttp2.h>
#include <sys/mman.h>
#include <unistd.h>

namespace konn::core::h2 {
namespace {

std::atomic<uint64_t> g_sparse_blocks{0};
std::atomic<uint64_t> g_released_bytes{0};

// Hands back the whole pages inside [p, p + n): nothing in them was written yet.
void release_interior(void* p, size_t n) {
  if (p == nullptr || n < kSparseBlockBytes) return;
  static const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + page - 1) & ~(page - 1);
  const uintptr_t last = (begin + n) & ~(page - 1);
  g_sparse_blocks.fetch_add(1, std::memory_order_relaxed);
  if (last <= first) return;
  // Private anonymous memory (the heap or an arena): the pages read as zeros when next touched.
  if (madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) == 0) {
    g_released_bytes.fetch_add(last - first, std::memory_order_relaxed);
  }
}

void* session_malloc(size_t size, void* /*user*/) {
  void* p = std::malloc(size);
  release_interior(p, size);
  return p;
}

void session_free(void* ptr, void* /*user*/) { std::free(ptr); }

void* session_calloc(size_t nmemb, size_t size, void* /*user*/) {
  return std::calloc(nmemb, size);
}

void* session_realloc(void* ptr, size_t size, void* /*user*/) {
  // A new block (nghttp2 allocates its frame buffer as realloc(NULL, n)): nothing to keep. A
  // grown one keeps its bytes, so its pages are left alone.
  if (ptr == nullptr) return session_malloc(size, nullptr);
  return std::realloc(ptr, size);
}

nghttp2_mem g_session_mem{nullptr, session_malloc, session_free, session_calloc,
                          session_realloc};

}  // namespace

nghttp2_mem* session_memory() { return &g_session_mem; }

SessionMemoryStats session_memory_stats() {
  return {g_sparse_blocks.load(std::memory_order_relaxed),
          g_released_bytes.load(std::memory_order_relaxed)};
}

}  // namespace konn::core::h2
