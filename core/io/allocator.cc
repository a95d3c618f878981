#include "core/io/allocator.h"

#include <malloc.h>

namespace konn::core::io {

namespace {
// Larger than any buffer we allocate (kCoalesceLimit, 1 MiB; the splice pipes are kernel memory).
constexpr int kMmapThreshold = 32 << 20;
// A few in-flight windows' worth stays mapped between bursts.
constexpr int kTrimThreshold = 128 << 20;
}  // namespace

void tune_allocator_for_relaying() {
  mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
  mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
}

void release_free_memory() { malloc_trim(0); }

}  // namespace konn::core::io
