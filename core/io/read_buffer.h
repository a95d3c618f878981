#pragma once

#include <vector>

namespace konn::core::io {

// The buffer a thread reads sockets into when it does not yet know how much is there: one per
// thread (64 KiB), so that an idle connection holds none. Whatever is read into it must be
// consumed or copied before the thread reads anything else.
std::vector<char>& thread_read_buffer();

}  // namespace konn::core::io
