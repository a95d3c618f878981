#include "core/tunnel/socket_reader.h"

#include <algorithm>
#include <cerrno>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <asio/error.hpp>

#include "core/io/read_buffer.h"
#include "core/tunnel/packet.h"

namespace konn::core::tunnel {
namespace {

// recv(2) without blocking; the result as asio reports it.
size_t receive(int fd, char* buf, size_t len, std::error_code& ec) {
  for (;;) {
    const ssize_t n = ::recv(fd, buf, len, MSG_DONTWAIT);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) {
      ec = asio::error::eof;
      return 0;
    }
    if (errno == EINTR) continue;
    ec = (errno == EAGAIN || errno == EWOULDBLOCK)
             ? std::error_code(asio::error::would_block)
             : std::error_code(errno, asio::error::get_system_category());
    return 0;
  }
}

}  // namespace

std::string SocketReader::read(int fd, size_t limit, std::error_code& ec) {
  ec.clear();
  if (chunks_) {
    int available = 0;
    const bool known = ::ioctl(fd, FIONREAD, &available) == 0;
    size_t want = read_size_for(known && available > 0 ? static_cast<size_t>(available) : 0, known);
    std::string buf(std::min(want, limit), '\0');
    const size_t n = receive(fd, buf.data(), buf.size(), ec);
    if (n < kSmallRead) {
      chunks_ = false;
      // A few bytes do not keep a whole chunk.
      if (buf.size() >= kSmallRead) return std::string(buf.data(), n);
    }
    buf.resize(n);
    return buf;
  }
  std::vector<char>& scratch = io::thread_read_buffer();
  const size_t n = receive(fd, scratch.data(), std::min(limit, scratch.size()), ec);
  if (n == scratch.size()) chunks_ = true;  // it filled the buffer: more is probably waiting
  return std::string(scratch.data(), n);
}

}  // namespace konn::core::tunnel
