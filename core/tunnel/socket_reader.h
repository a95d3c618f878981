#pragma once

#include <cstddef>
#include <string>
#include <system_error>

namespace konn::core::tunnel {

// Reads a readable socket into a string of the size read: the payload of one DATA packet.
//
// Most tunnels carry small messages (a request, an answer), and a few carry bulk. A small read
// goes into the thread's buffer (core/io/read_buffer.h) and is copied into a string of its size:
// no FIONREAD to size it, no zero-filled chunk. Once a read fills that buffer, the connection is
// moving bulk, and the next reads ask FIONREAD and read up to a whole chunk (kReadChunk) straight
// into the packet's string, until a read comes back below kSmallRead.
//
// Not thread-safe: one reader per connection, used by the thread that reads it.
class SocketReader {
 public:
  // Reads at most `limit` (> 0) bytes of `fd` without blocking. Returns what was read (never
  // empty), or an empty string with `ec` set: asio::error::eof at the end of the stream,
  // would_block when nothing was there, or the read's error.
  std::string read(int fd, size_t limit, std::error_code& ec);

  // Whether the next read is sized by FIONREAD (the last one was large).
  bool reading_chunks() const { return chunks_; }

 private:
  bool chunks_ = false;
};

}  // namespace konn::core::tunnel
