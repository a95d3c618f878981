#pragma once

#include <string>

namespace konn::core::profiling {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// A sanitizer build replaces malloc: glibc's statistics would show an empty heap.
inline constexpr const char* kAllocator = "sanitizer";
#else
inline constexpr const char* kAllocator = "glibc";
#endif

// The allocator's statistics as a JSON object (glibc malloc: mallinfo2() for the whole process,
// every arena together), plus the process's resident memory from /proc/self/statm:
//   allocator            kAllocator: "glibc", or "sanitizer" in an ASan or TSan build, where
//                        in_use_bytes, heap_bytes and free_bytes are the sanitizer allocator's
//                        (__sanitizer_get_*) and the other fields 0
//   heap_bytes           bytes of heap obtained with brk/sbrk and arenas (mallinfo2 arena)
//   mmap_bytes           bytes in chunks served by their own mmap (hblkhd), mmap_chunks (hblks)
//   in_use_bytes         bytes handed out and not yet freed (uordblks + hblkhd)
//   free_bytes           bytes free inside the heap (fordblks), free_chunks (ordblks)
//   fastbin_free_bytes   of which in fastbins (fsmblks)
//   releasable_bytes     free bytes at the top of the main heap that malloc_trim can return
//                        (keepcost)
//   rss_bytes            resident set size of the process
std::string heap_stats_json();

// glibc's own malloc_info() document (XML, one <heap> per arena with its free-chunk sizes).
std::string malloc_info_xml();

}  // namespace konn::core::profiling
