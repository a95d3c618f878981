#include "core/relay/write_role.h"

#include <cerrno>
#include <sys/socket.h>

namespace konn::core::relay {

WriteRole::Result WriteRole::deliver(std::string_view bytes, size_t max_direct) {
  std::lock_guard lock(mu_);
  Result r;
  if (open_ && bytes.size() <= max_direct) {
    while (r.written < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + r.written, bytes.size() - r.written,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        r.written += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      // Full (EAGAIN) or failed: the owner's own write waits for room, or reports the error.
      break;
    }
    if (r.written == bytes.size()) return r;
  }
  open_ = false;
  ++posted_;
  r.post = true;
  return r;
}

void WriteRole::arrived() {
  std::lock_guard lock(mu_);
  if (posted_ > 0) --posted_;
}

void WriteRole::open(int fd) {
  std::lock_guard lock(mu_);
  if (posted_ != 0 || fd < 0) return;
  fd_ = fd;
  open_ = true;
}

void WriteRole::close() {
  std::lock_guard lock(mu_);
  open_ = false;
}

}  // namespace konn::core::relay
