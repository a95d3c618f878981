#pragma once

#include <cstddef>
#include <cstdint>

#include <nghttp2/nghttp2.h>

namespace konn::core::h2 {

// nghttp2's allocator for every Connection's session. Each session keeps, for its whole life, a
// frame buffer of about 16 KiB (one frame of the largest default size) into which it writes the
// frames it sends. konn's frames with a payload of any size are DATA, written from the stream's
// queue without passing through that buffer (nghttp2's send_data callback); what the buffer
// takes are frame headers and small control frames (SETTINGS, PING, WINDOW_UPDATE, HEADERS), a
// few hundred bytes at its start. So every block of at least kSparseBlockBytes is handed back to
// the kernel page by page (MADV_DONTNEED on its whole interior pages) as it is allocated: an idle
// connection pays for the page its frames touch, not for 16 KiB (issue 42: 20 000 agent
// connections on one server). A page written later comes back on its own, zero-filled.
nghttp2_mem* session_memory();

// Blocks of this size or more are released as they are allocated (nghttp2's frame buffer is
// 16 394 bytes).
inline constexpr size_t kSparseBlockBytes = 12 * 1024;

struct SessionMemoryStats {
  uint64_t sparse_blocks = 0;   // blocks allocated at kSparseBlockBytes or more
  uint64_t released_bytes = 0;  // bytes of their interior pages handed back when allocated
};
// Process-wide totals (relaxed counters; any thread).
SessionMemoryStats session_memory_stats();

}  // namespace konn::core::h2
