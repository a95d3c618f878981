#include "core/profiling/heap_stats.h"

#include <cstdio>
#include <fstream>
#include <malloc.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// The sanitizer runtime's allocator interface (<sanitizer/allocator_interface.h>, which GCC 12
// does not install).
extern "C" {
size_t __sanitizer_get_current_allocated_bytes();
size_t __sanitizer_get_heap_size();
size_t __sanitizer_get_free_bytes();
}
#endif

namespace konn::core::profiling {

std::string heap_stats_json() {
  struct mallinfo2 mi = mallinfo2();
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  mi = {};
  mi.arena = __sanitizer_get_heap_size();
  mi.uordblks = __sanitizer_get_current_allocated_bytes();
  mi.fordblks = __sanitizer_get_free_bytes();
#endif
  size_t resident_pages = 0;
  {
    std::ifstream statm("/proc/self/statm");
    size_t total = 0;
    statm >> total >> resident_pages;
  }
  size_t rss = resident_pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char out[768];
  std::snprintf(out, sizeof out,
                "{\"allocator\":\"%s\",\"heap_bytes\":%zu,\"mmap_bytes\":%zu,"
                "\"mmap_chunks\":%zu,\"in_use_bytes\":%zu,\"free_bytes\":%zu,\"free_chunks\":%zu,"
                "\"fastbin_free_bytes\":%zu,\"releasable_bytes\":%zu,\"rss_bytes\":%zu}\n",
                kAllocator, mi.arena, mi.hblkhd, mi.hblks, mi.uordblks + mi.hblkhd, mi.fordblks,
                mi.ordblks, mi.fsmblks, mi.keepcost, rss);
  return out;
}

std::string malloc_info_xml() {
  char* data = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&data, &size);  // NOLINT(cppcoreguidelines-owning-memory)
  if (f == nullptr) return {};
  malloc_info(0, f);  // NOLINT(cppcoreguidelines-owning-memory)
  std::fclose(f);     // NOLINT(cppcoreguidelines-owning-memory)
  std::string out(data, size);
  std::free(data);  // NOLINT(cppcoreguidelines-owning-memory): open_memstream's buffer
  return out;
}

}  // namespace konn::core::profiling
