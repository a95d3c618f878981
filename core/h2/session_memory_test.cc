#include "core/h2/session_memory.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/local/connect_pair.hpp>
#include <catch2/catch.hpp>
#include <nghttp2/nghttp2.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/h2/connection.h"

namespace {

using konn::core::h2::Connection;
using konn::core::h2::session_memory;
using konn::core::h2::session_memory_stats;

// How many whole pages of [p, p + n) are resident.
size_t resident_pages(void* p, size_t n) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + page - 1) & ~(page - 1);
  const uintptr_t last = (begin + n) & ~(page - 1);
  if (last <= first) return 0;
  std::vector<unsigned char> vec((last - first) / page);
  REQUIRE(mincore(reinterpret_cast<void*>(first), last - first, vec.data()) == 0);
  size_t resident = 0;
  for (unsigned char v : vec) resident += v & 1;
  return resident;
}

}  // namespace

TEST_CASE("h2 session memory: a frame-buffer-sized block holds only the pages written to",
          "[h2][memory]") {
  nghttp2_mem* mem = session_memory();
  const size_t n = 16394;  // nghttp2's frame buffer: 9 + 1 + 16384 bytes
  const auto before = session_memory_stats();
  // Touch memory of the same size first, so that the block is likely to reuse written pages.
  {
    std::vector<char> warm(64 * 1024, 'x');
    REQUIRE(warm.back() == 'x');
  }
  void* p = mem->realloc(nullptr, n, mem->mem_user_data);
  REQUIRE(p != nullptr);
  std::memset(p, 1, 64);  // a SETTINGS frame's worth
  CHECK(resident_pages(p, n) <= 1);
  const auto after = session_memory_stats();
  CHECK(after.sparse_blocks == before.sparse_blocks + 1);
  CHECK(after.released_bytes >= before.released_bytes + 8192);
  // Written later: the bytes are kept.
  auto* bytes = static_cast<unsigned char*>(p);
  std::memset(bytes + 8192, 7, 4096);
  CHECK(bytes[8192 + 4095] == 7);
  CHECK(resident_pages(p, n) >= 1);
  mem->free(p, mem->mem_user_data);

  // Small blocks and grown ones are left alone (their bytes are kept).
  void* small = mem->malloc(100, mem->mem_user_data);
  std::memset(small, 3, 100);
  void* grown = mem->realloc(small, 20000, mem->mem_user_data);
  CHECK(static_cast<unsigned char*>(grown)[99] == 3);
  mem->free(grown, mem->mem_user_data);
  CHECK(session_memory_stats().sparse_blocks == after.sparse_blocks);
}

TEST_CASE("h2 session memory: every Connection's session allocates through it", "[h2][memory]") {
  asio::io_context io;
  asio::local::stream_protocol::socket a(io);
  asio::local::stream_protocol::socket b(io);
  asio::local::connect_pair(a, b);
  const auto before = session_memory_stats();
  auto server = Connection::create(
      Connection::Role::Server,
      std::make_unique<konn::core::h2::UnixTransport>(std::move(a)), {});
  auto client = Connection::create(
      Connection::Role::Client,
      std::make_unique<konn::core::h2::UnixTransport>(std::move(b)), {});
  // One frame buffer each.
  CHECK(session_memory_stats().sparse_blocks == before.sparse_blocks + 2);
  CHECK(session_memory_stats().released_bytes >= before.released_bytes + 2 * 8192);
}

TEST_CASE("h2 stream queues hold no memory while empty", "[h2][memory]") {
  konn::core::h2::IdleFreeQueue<std::string> q;
  CHECK_FALSE(q.holds_memory());
  CHECK(q.begin() == q.end());
  q.push_back("a");
  q.push_back("b");
  CHECK(q.holds_memory());
  CHECK(q.size() == 2);
  CHECK(q.front() == "a");
  q.pop_front();
  CHECK(q.holds_memory());
  q.pop_back();
  CHECK(q.empty());
  CHECK_FALSE(q.holds_memory());  // the last one out freed the block
  q.push_back("c");
  q.clear();
  CHECK_FALSE(q.holds_memory());
}
