#include "core/io/read_buffer.h"

namespace konn::core::io {

std::vector<char>& thread_read_buffer() {
  static thread_local std::vector<char> buf(64 * 1024);
  return buf;
}

}  // namespace konn::core::io
