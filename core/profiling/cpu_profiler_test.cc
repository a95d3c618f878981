#include "core/profiling/cpu_profiler.h"

#include <atomic>
#include <chrono>
#include <sstream>
#include <sys/prctl.h>
#include <thread>
#include <time.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "core/profiling/symbolizer.h"

using namespace konn::core::profiling;
using namespace std::chrono_literals;

namespace konn_profile_test {

// Burns `how_long` of this thread's CPU time (not wall time: the machine may be shared) in a
// function of this test binary that nothing inlines.
__attribute__((noinline)) uint64_t spin_for_the_profiler(std::chrono::milliseconds how_long) {
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
  };
  auto until = cpu_now() + how_long;
  volatile uint64_t x = 1;
  while (cpu_now() < until) {
    for (int i = 0; i < 10000; ++i) x = x * 6364136223846793005ULL + 1;
  }
  return x;
}

}  // namespace konn_profile_test

TEST_CASE("a CPU profile names the functions that ran, under their thread", "[profiling]") {
  std::string why;
  REQUIRE(CpuProfiler::start(200, 10000, &why));
  CHECK(CpuProfiler::running());
  std::string second_why;
  CHECK_FALSE(CpuProfiler::start(200, 10, &second_why));  // one at a time
  CHECK(second_why.find("already running") != std::string::npos);
  std::thread burner([] {
    prctl(PR_SET_NAME, "burner", 0, 0, 0);
    konn_profile_test::spin_for_the_profiler(600ms);
  });
  burner.join();
  auto profile = CpuProfiler::stop();
  CHECK_FALSE(CpuProfiler::running());
  CHECK(profile.hz == 200);
  // 600 ms of CPU at 200 Hz: about 120 samples; the kernel checks the timer only at its ticks.
  CHECK(profile.samples.size() >= 30);
  auto folded = fold(profile);
  INFO(folded.substr(0, 2000));
  bool found = false;
  std::istringstream lines(folded);
  for (std::string line; std::getline(lines, line);) {
    auto space = line.rfind(' ');
    REQUIRE(space != std::string::npos);
    CHECK(std::stoul(line.substr(space + 1)) >= 1);
    if (line.rfind("burner;", 0) == 0 &&
        line.find("konn_profile_test::spin_for_the_profiler(std::chrono::duration<long, "
                  "std::ratio<1l, 1000l> >)") != std::string::npos) {
      found = true;
    }
  }
  CHECK(found);
  // Stopping again is harmless, and a new profile can start.
  CHECK(CpuProfiler::stop().samples.empty());
  REQUIRE(CpuProfiler::start(100, 10, &why));
  CpuProfiler::stop();
}

TEST_CASE("the symbolizer names functions of the binary and of shared libraries", "[profiling]") {
  Symbolizer s;
  auto* self = reinterpret_cast<void*>(&konn_profile_test::spin_for_the_profiler);
  CHECK(s.name(self, false).find("konn_profile_test::spin_for_the_profiler") == 0);
  auto* libc = reinterpret_cast<void*>(&::getpid);
  CHECK(s.name(libc, false).find("getpid") != std::string::npos);
  CHECK(demangle("_ZN4konn4core9profiling8demangleEPKc") ==
        "konn::core::profiling::demangle(char const*)");
  CHECK(demangle("main") == "main");
}
