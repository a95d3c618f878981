#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace konn::core::profiling {

// One sampled call stack: return addresses, innermost first, and the name of the thread that was
// running (prctl PR_GET_NAME, at most 15 characters).
struct StackSample {
  std::vector<void*> frames;
  std::string thread;
};

struct CpuProfile {
  std::vector<StackSample> samples;
  size_t dropped = 0;  // samples that did not fit the buffer
  int hz = 0;
  std::chrono::duration<double> duration{};
};

// An in-process CPU profiler: setitimer(ITIMER_PROF) makes the kernel send SIGPROF every 1/hz of
// CPU time the process uses (all threads together), and the handler records the running thread's
// call stack (glibc backtrace(), unwinding by the binaries' .eh_frame) into a buffer allocated
// beforehand; the handler neither allocates nor locks. One profile at a time per process: the
// timer and the signal are process-wide. No external tool (perf, gdb) is needed.
//
// Once a profile has run, the SIGPROF handler stays installed (ignoring the signal when no
// profile runs), so that a late signal never reaches SIGPROF's default action, which ends the
// process.
class CpuProfiler {
 public:
  // Starts sampling at `hz` with room for `max_samples` stacks. False, with `why`, when a profile
  // is already running or the timer cannot be set.
  static bool start(int hz, size_t max_samples, std::string* why);
  // Stops sampling (waiting for a handler still running on another thread) and returns what was
  // recorded. Call only after a successful start().
  static CpuProfile stop();
  static bool running();
};

// Folded stacks ("root;caller;callee count" per line, roots first, the thread's name as the
// outermost frame), the format flamegraph.pl, speedscope and inferno read. Frames are function
// names, demangled, or "file+0xoffset" when a binary has no symbol for the address.
std::string fold(const CpuProfile& profile);

}  // namespace konn::core::profiling
