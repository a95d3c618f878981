#pragma once

#include <string>

#include "core/admin/admin_server.h"

namespace konn::core::profiling {

// What --enable-profiling and --enable-contention-profiling turn on (upstream serves Go's
// net/http/pprof on the admin port for them).
struct ProfilingOptions {
  bool enabled = false;             // --enable-profiling
  bool contention_enabled = false;  // --enable-contention-profiling
};

// Routes under /debug/pprof/ on `admin` when profiling is enabled; none otherwise (the paths then
// answer 404 like every unknown path):
//   /debug/pprof/            an index of the routes below
//   /debug/pprof/profile     ?seconds=N (1..60, default 30): a CPU profile of the whole process,
//                            as folded stacks (cpu_profiler.h); 409 while another one runs. The
//                            wait is a timer on the admin thread, so /healthz and /metrics keep
//                            answering meanwhile.
//   /debug/pprof/heap        the allocator's statistics as JSON (heap_stats.h); ?format=xml:
//                            glibc's malloc_info document
//   /debug/pprof/block,      501: konn has no lock-contention profile (see
//   /debug/pprof/mutex       kContentionExplanation)
void add_pprof_routes(admin::AdminServer& admin, const ProfilingOptions& options);

// The start-up warning for --enable-contention-profiling, and the body of the 501 answers.
inline constexpr const char* kContentionExplanation =
    "konn has no lock-contention profile: its locks are plain std::mutex, not instrumented, so "
    "/debug/pprof/block and /debug/pprof/mutex answer 501. Time spent waiting for a lock shows "
    "in the CPU profile (/debug/pprof/profile) as futex / __lll_lock_wait frames under the "
    "function that took the lock.";

// The longest and the default CPU profile, in seconds.
inline constexpr int kMaxProfileSeconds = 60;
inline constexpr int kDefaultProfileSeconds = 30;

}  // namespace konn::core::profiling
