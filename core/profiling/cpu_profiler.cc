#include "core/profiling/cpu_profiler.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <execinfo.h>
#include <map>
#include <memory>
#include <mutex>
#include <sys/prctl.h>
#include <sys/time.h>
#include <thread>
#include <ucontext.h>

#include "core/profiling/symbolizer.h"

namespace konn::core::profiling {
namespace {

constexpr int kMaxFrames = 64;

struct RawSample {
  void* frames[kMaxFrames];
  int depth;
  char thread[16];
  std::atomic<bool> complete;
};

// What the signal handler writes to; published through `g_buffer`.
struct SampleBuffer {
  explicit SampleBuffer(size_t n) : samples(std::make_unique<RawSample[]>(n)), capacity(n) {}
  std::unique_ptr<RawSample[]> samples;
  size_t capacity;
  std::atomic<size_t> next{0};
  std::atomic<size_t> dropped{0};
};

std::atomic<SampleBuffer*> g_buffer{nullptr};
std::atomic<int> g_in_handler{0};
std::mutex g_mu;  // start/stop
bool g_handler_installed = false;
std::unique_ptr<SampleBuffer> g_owned;
std::chrono::steady_clock::time_point g_started;
int g_hz = 0;

// The interrupted program counter, from the signal's saved registers.
void* interrupted_pc(void* ucontext) {
#if defined(__x86_64__)
  // NOLINTNEXTLINE(performance-no-int-to-ptr): a saved register holding an address
  return reinterpret_cast<void*>(static_cast<ucontext_t*>(ucontext)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  // NOLINTNEXTLINE(performance-no-int-to-ptr): a saved register holding an address
  return reinterpret_cast<void*>(static_cast<ucontext_t*>(ucontext)->uc_mcontext.pc);
#else
  (void)ucontext;
  return nullptr;
#endif
}

// Async-signal context: no allocation, no lock; backtrace() was warmed up by start() (its first
// call loads libgcc_s).
void on_sigprof(int /*sig*/, siginfo_t* /*info*/, void* ucontext) {
  int saved_errno = errno;
  g_in_handler.fetch_add(1);
  if (SampleBuffer* buf = g_buffer.load()) {
    size_t i = buf->next.fetch_add(1);
    if (i < buf->capacity) {
      RawSample& s = buf->samples[i];
      void* raw[kMaxFrames];
      int n = backtrace(raw, kMaxFrames);
      // Frames up to the signal trampoline belong to this handler: start at the interrupted pc.
      void* pc = interrupted_pc(ucontext);
      int first = std::min(n, 2);
      for (int k = 0; k < n; ++k) {
        if (raw[k] == pc) {
          first = k;
          break;
        }
      }
      int depth = 0;
      if (pc != nullptr && (first >= n || raw[first] != pc)) s.frames[depth++] = pc;
      for (int k = first; k < n && depth < kMaxFrames; ++k) s.frames[depth++] = raw[k];
      s.depth = depth;
      if (prctl(PR_GET_NAME, s.thread, 0, 0, 0) != 0) s.thread[0] = '\0';
      s.thread[15] = '\0';
      s.complete.store(true);
    } else {
      buf->dropped.fetch_add(1);
    }
  }
  g_in_handler.fetch_sub(1);
  errno = saved_errno;
}

bool set_timer(int hz) {
  itimerval tv{};
  if (hz > 0) {
    tv.it_interval.tv_usec = 1000000 / hz;
    tv.it_value = tv.it_interval;
  }
  return setitimer(ITIMER_PROF, &tv, nullptr) == 0;
}

}  // namespace

bool CpuProfiler::start(int hz, size_t max_samples, std::string* why) {
  std::lock_guard lock(g_mu);
  if (g_owned) {
    *why = "a CPU profile is already running";
    return false;
  }
  if (hz < 1 || hz > 1000) {
    *why = "sampling rate must be 1..1000 Hz";
    return false;
  }
  {
    void* warm[4];
    backtrace(warm, 4);  // loads the unwinder now, not inside the signal handler
  }
  if (!g_handler_installed) {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigprof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, nullptr) != 0) {
      *why = std::string("sigaction(SIGPROF): ") + std::strerror(errno);
      return false;
    }
    g_handler_installed = true;
  }
  g_owned = std::make_unique<SampleBuffer>(max_samples);
  for (size_t i = 0; i < max_samples; ++i) g_owned->samples[i].complete.store(false);
  g_buffer.store(g_owned.get());
  g_started = std::chrono::steady_clock::now();
  g_hz = hz;
  if (!set_timer(hz)) {
    *why = std::string("setitimer(ITIMER_PROF): ") + std::strerror(errno);
    g_buffer.store(nullptr);
    g_owned.reset();
    return false;
  }
  return true;
}

CpuProfile CpuProfiler::stop() {
  std::lock_guard lock(g_mu);
  CpuProfile out;
  if (!g_owned) return out;
  set_timer(0);
  g_buffer.store(nullptr);
  // A handler that saw the buffer before it was withdrawn may still be writing to it.
  while (g_in_handler.load() != 0) std::this_thread::yield();
  out.hz = g_hz;
  out.duration = std::chrono::steady_clock::now() - g_started;
  size_t n = std::min(g_owned->next.load(), g_owned->capacity);
  out.dropped = g_owned->dropped.load();
  out.samples.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const RawSample& s = g_owned->samples[i];
    if (!s.complete.load()) continue;
    out.samples.push_back({std::vector<void*>(s.frames, s.frames + s.depth), s.thread});
  }
  g_owned.reset();
  return out;
}

bool CpuProfiler::running() {
  std::lock_guard lock(g_mu);
  return g_owned != nullptr;
}

std::string fold(const CpuProfile& profile) {
  Symbolizer symbols;
  std::map<std::string, size_t> counts;
  for (const auto& s : profile.samples) {
    std::string line = s.thread.empty() ? std::string("?") : s.thread;
    // Innermost first in the sample; folded stacks list the root first.
    for (size_t k = s.frames.size(); k-- > 0;) {
      std::string name = symbols.name(s.frames[k], k != 0);
      std::replace(name.begin(), name.end(), ';', ':');
      line += ';';
      line += name;
    }
    ++counts[line];
  }
  std::string out;
  for (const auto& [stack, n] : counts) out += stack + " " + std::to_string(n) + "\n";
  return out;
}

}  // namespace konn::core::profiling
