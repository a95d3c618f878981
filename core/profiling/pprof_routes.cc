#include "core/profiling/pprof_routes.h"

#include <algorithm>
#include <charconv>
#include <thread>

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>

#include "core/io/asio_compat.h"
#include "core/profiling/cpu_profiler.h"
#include "core/profiling/heap_stats.h"

namespace konn::core::profiling {
namespace {

constexpr int kSampleHz = 100;
// Stacks kept per profile at most (about 0.5 KiB each), whatever the number of CPUs.
constexpr size_t kMaxSamples = 30000;

// The value of `key` in a query string ("seconds=5&x=1"), "" when absent.
std::string query_value(const std::string& query, const std::string& key) {
  size_t start = 0;
  while (start <= query.size()) {
    auto amp = query.find('&', start);
    std::string kv =
        query.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
    if (kv.rfind(key + "=", 0) == 0) return kv.substr(key.size() + 1);
    if (amp == std::string::npos) break;
    start = amp + 1;
  }
  return {};
}

admin::Response text(int status, const std::string& body) {
  return admin::Response{status, "text/plain; charset=utf-8", body, {}};
}

// Stops a profile whose request goes away (the admin server stopping mid-profile).
struct StopOnExit {
  bool armed = true;
  StopOnExit() = default;
  StopOnExit(const StopOnExit&) = delete;
  StopOnExit& operator=(const StopOnExit&) = delete;
  ~StopOnExit() {
    if (armed) CpuProfiler::stop();
  }
};

io::Awaitable<admin::Response> cpu_profile(std::string query) {
  int seconds = kDefaultProfileSeconds;
  std::string given = query_value(query, "seconds");
  if (!given.empty()) {
    auto [ptr, ec] = std::from_chars(given.data(), given.data() + given.size(), seconds);
    if (ec != std::errc() || ptr != given.data() + given.size() || seconds < 1 ||
        seconds > kMaxProfileSeconds) {
      co_return text(400, "seconds: want a whole number from 1 to " +
                              std::to_string(kMaxProfileSeconds) + ", got \"" + given + "\"\n");
    }
  }
  size_t cpus = std::max(1u, std::thread::hardware_concurrency());
  size_t capacity = std::min(kMaxSamples, static_cast<size_t>(seconds) * kSampleHz * cpus + 64);
  std::string why;
  if (!CpuProfiler::start(kSampleHz, capacity, &why)) co_return text(409, why + "\n");
  StopOnExit guard;
  asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::seconds(seconds));
  co_await timer.async_wait(io::use_nothrow);
  guard.armed = false;
  auto profile = CpuProfiler::stop();
  co_return text(200, fold(profile));
}

constexpr const char* kIndex =
    "konn profiling (--enable-profiling)\n"
    "\n"
    "/debug/pprof/profile?seconds=N  CPU profile of the whole process for N seconds (1..60,\n"
    "                                default 30), sampled at 100 Hz of CPU time by SIGPROF;\n"
    "                                folded stacks (\"thread;root;...;leaf count\") for\n"
    "                                flamegraph.pl, speedscope or inferno\n"
    "/debug/pprof/heap               glibc malloc statistics and RSS as JSON\n"
    "/debug/pprof/heap?format=xml    glibc malloc_info() per arena\n"
    "/debug/pprof/block, /mutex      501: no lock-contention profile in konn\n";

}  // namespace

void add_pprof_routes(admin::AdminServer& admin, const ProfilingOptions& options) {
  if (!options.enabled) return;
  auto index = [](const std::string&) { return text(200, kIndex); };
  admin.route("/debug/pprof", index);
  admin.route("/debug/pprof/", index);
  admin.route_async("/debug/pprof/profile", cpu_profile);
  admin.route("/debug/pprof/heap", [](const std::string& query) {
    if (query_value(query, "format") == "xml") {
      return admin::Response{200, "text/xml; charset=utf-8", malloc_info_xml(), {}};
    }
    return admin::Response{200, "application/json", heap_stats_json(), {}};
  });
  auto contention = [](const std::string&) {
    return text(501, std::string(kContentionExplanation) + "\n");
  };
  admin.route("/debug/pprof/block", contention);
  admin.route("/debug/pprof/mutex", contention);
}

}  // namespace konn::core::profiling
