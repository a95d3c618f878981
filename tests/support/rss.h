#pragma once

#include <cstddef>
#include <cstdio>
#include <unistd.h>

namespace konn::testsupport {

// Resident set of this process, in bytes (/proc/self/statm, second field, in pages).
inline size_t rss_bytes() {
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    long size = 0;
    if (std::fscanf(f, "%ld %ld", &size, &pages) != 2) pages = 0;
    std::fclose(f);
  }
  return static_cast<size_t>(pages) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace konn::testsupport
