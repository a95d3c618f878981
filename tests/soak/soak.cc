// konn-soak: the fault and soak test of issue 8 (tests/soak/README.md). Starts its own fleet on
// loopback (two proxy-servers, gRPC and HTTP CONNECT frontends; agents behind a balancer; mTLS),
// runs N tunnels over a bounded time through both frontends while it SIGKILLs and restarts agents
// and a server at random (seeded), then checks that every verified byte matched, that no tunnel,
// pending dial or connection is left in any daemon's metrics, that each daemon's descriptors are
// back to its idle count and that the RSS of the daemons that ran throughout is within 10% of its
// value after warm-up. Prints a summary (and --json=FILE); exits 1 naming every violation.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <vector>

#include <asio/experimental/concurrent_channel.hpp>
#include <asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "bench/loadgen/destination.h"
#include "core/config/flag_parser.h"
#include "tests/soak/soak_fleet.h"
#include "tests/soak/soak_tunnel.h"
#include "tests/support/sanitizers.h"

namespace konn::soak {
namespace {

using core::io::Awaitable;
using core::io::use_nothrow;
using namespace std::chrono_literals;
using Json = nlohmann::json;

// Once the fleet is quiet, how long before RSS and descriptors are sampled (after the warm-up
// and at the end alike): two periods of the daemons' memory trimmer (core/io/allocator.h) and a
// margin, so that both samples see the memory a daemon gives back rather than one of them.
constexpr auto kQuietBeforeSample = 5s;

struct Options {
  int tunnels = 10000;
  core::config::Duration duration = std::chrono::seconds(180);
  int64_t seed = 0;  // 0: drawn (and printed)
  int concurrency = 48;
  int warmup = 0;  // 0: max(200, tunnels / 10)
  int agents = 3;
  bool faults = true;
  bool rss_check = true;  // false: RSS reported, not checked (the short ctest variant)
  int client_threads = 2;
  int grpc_channels = 4;
  core::config::Duration tunnel_timeout = std::chrono::seconds(60);
  core::config::Duration settle = std::chrono::seconds(30);
  std::string json;
  std::string daemon_log_level = "info";
  std::string logs;  // copy daemon logs here (always on a violation: a temp dir if empty)
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A fault and the time its effects may last: from the kill until the restarted daemon is back
// in the fleet (plus a grace). A tunnel that failed overlapping a window is the fault's doing.
struct Fault {
  std::string daemon;
  Clock::time_point killed;
  Clock::time_point back;  // restarted, reconnected and measured
  double down_seconds = 0;
};

// Runs the tunnels of one phase on the client's io_contexts with bounded concurrency, paced
// (tunnel i starts no earlier than start + i * interval) or as fast as the bound allows; new
// starts wait while `paused` is set (a restarted daemon's idle point is being measured).
class Load {
 public:
  Load(bench::Opener& grpc, bench::Opener& connect, std::string target, int threads,
       std::chrono::milliseconds limit)
      : grpc_(grpc), connect_(connect), target_(std::move(target)), limit_(limit) {
    for (int i = 0; i < std::max(1, threads); ++i) {
      contexts_.push_back(std::make_unique<asio::io_context>(1));
    }
  }

  // Starts the phase on the load's threads; done() tells when every tunnel ended.
  void start(std::vector<TunnelPlan> plans, Clock::duration interval, int concurrency) {
    plans_ = std::move(plans);
    results_.assign(plans_.size(), TunnelResult{});
    left_ = static_cast<int>(plans_.size());
    done_ = std::promise<void>();
    done_future_ = done_.get_future();
    if (plans_.empty()) {
      done_.set_value();
      return;
    }
    slots_ = std::make_unique<Slots>(contexts_[0]->get_executor(), concurrency);
    for (int i = 0; i < concurrency; ++i) slots_->try_send(std::error_code(), 0);
    for (auto& c : contexts_) c->restart();
    asio::co_spawn(*contexts_[0], schedule(interval), asio::detached);
    for (auto& c : contexts_) {
      threads_.emplace_back([ctx = c.get()] {
        auto guard = asio::make_work_guard(*ctx);
        ctx->run();
      });
    }
  }
  bool done(Clock::duration wait) {
    return done_future_.wait_for(wait) == std::future_status::ready;
  }
  // Stops the threads (after done(), or to abandon an overrun phase).
  void stop() {
    for (auto& c : contexts_) c->stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  int started() const { return started_.load(); }
  int in_flight() const { return started_.load() - ended_.load(); }
  const std::vector<TunnelPlan>& plans() const { return plans_; }
  const std::vector<TunnelResult>& results() const { return results_; }
  std::atomic<bool> paused{false};

 private:
  using Slots = asio::experimental::concurrent_channel<void(std::error_code, int)>;

  Awaitable<void> schedule(Clock::duration interval) {
    const Clock::time_point t0 = Clock::now();
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (size_t i = 0; i < plans_.size(); ++i) {
      timer.expires_at(t0 + interval * static_cast<int64_t>(i));
      co_await timer.async_wait(use_nothrow);
      co_await slots_->async_receive(use_nothrow);
      while (paused.load()) {
        timer.expires_after(10ms);
        co_await timer.async_wait(use_nothrow);
      }
      started_.fetch_add(1);
      asio::co_spawn(*contexts_[i % contexts_.size()], tunnel(i), asio::detached);
    }
  }

  Awaitable<void> tunnel(size_t i) {
    const TunnelPlan& plan = plans_[i];
    bench::Opener& opener = plan.path == Path::Grpc ? grpc_ : connect_;
    auto run = run_tunnel(opener, target_, plan, limit_);
    results_[i] = co_await std::move(run);
    ended_.fetch_add(1);
    slots_->try_send(std::error_code(), 0);
    if (left_.fetch_sub(1) == 1) done_.set_value();
  }

  bench::Opener& grpc_;
  bench::Opener& connect_;
  std::string target_;
  std::chrono::milliseconds limit_;
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::vector<std::thread> threads_;
  std::unique_ptr<Slots> slots_;
  std::vector<TunnelPlan> plans_;
  std::vector<TunnelResult> results_;
  std::atomic<int> left_{0};
  std::atomic<int> started_{0};
  std::atomic<int> ended_{0};
  std::promise<void> done_;
  std::future<void> done_future_;
};

template <typename Condition>
bool wait_until(Condition condition, Clock::duration timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
}

void raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  in >> a >> b >> c;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", a, b, c);
  return buf;
}

// "+2 socket, -1 pipe": what differs between two fd_kinds() samples.
std::string fd_diff(const std::map<std::string, int>& before,
                    const std::map<std::string, int>& after) {
  std::map<std::string, int> d;
  for (const auto& [k, n] : after) d[k] += n;
  for (const auto& [k, n] : before) d[k] -= n;
  std::string out;
  for (const auto& [k, n] : d) {
    if (n == 0) continue;
    out += (out.empty() ? "" : ", ") + std::string(n > 0 ? "+" : "") + std::to_string(n) + " " + k;
  }
  return out.empty() ? "same kinds" : out;
}

// Tally of one phase.
struct Tally {
  std::map<std::string, int> outcomes;  // outcome
  Json not_verified = Json::array();    // every tunnel that was not Verified, and why
  std::map<std::string, std::map<std::string, int>> by_kind;  // kind -> outcome
  std::map<std::string, std::map<std::string, int>> by_path;  // path -> outcome
  uint64_t bytes_verified = 0;
  int failed_by_fault = 0;
  double longest_tunnel_s = 0;
};

class Soak {
 public:
  explicit Soak(Options o) : o_(std::move(o)) {}

  int run();

 private:
  void violation(std::string what) {
    std::fprintf(stderr, "konn-soak: VIOLATION: %s\n", what.c_str());
    violations_.push_back(std::move(what));
  }
  std::vector<TunnelPlan> draw(int count, int first_index) {
    std::vector<TunnelPlan> plans;
    plans.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) plans.push_back(TunnelPlan::draw(first_index + i, rng_));
    return plans;
  }
  bool in_fault_window(const TunnelResult& r) const {
    const auto grace = std::chrono::milliseconds(1000 * testsupport::kSlowFactor);
    for (const auto& f : faults_) {
      if (r.start <= f.back + grace && r.end >= f.killed) return true;
    }
    return false;
  }
  Tally tally(const Load& load, bool faults_allowed, const char* phase);
  void inject_fault(Load& load, std::mt19937_64& rng);
  Json daemon_json() const;

  Options o_;
  Clock::time_point t0_ = Clock::now();  // times in the JSON are seconds from here
  Clock::time_point start_of_run_;
  std::mt19937_64 rng_;
  std::unique_ptr<SoakFleet> fleet_;
  std::vector<Fault> faults_;
  std::vector<std::string> violations_;
};

Tally Soak::tally(const Load& load, bool faults_allowed, const char* phase) {
  Tally t;
  int reported = 0;
  for (size_t i = 0; i < load.results().size(); ++i) {
    const TunnelResult& r = load.results()[i];
    const TunnelPlan& p = load.plans()[i];
    const std::string outcome = to_string(r.outcome);
    ++t.outcomes[outcome];
    ++t.by_kind[to_string(p.kind)][outcome];
    ++t.by_path[to_string(p.path)][outcome];
    t.bytes_verified += r.bytes_verified;
    t.longest_tunnel_s = std::max(t.longest_tunnel_s, seconds(r.end - r.start));
    if (r.outcome != Outcome::Verified) {
      t.not_verified.push_back({{"index", p.index},
                                {"kind", to_string(p.kind)},
                                {"path", to_string(p.path)},
                                {"bytes", p.bytes},
                                {"reset_after", p.reset_after},
                                {"outcome", outcome},
                                {"error", r.error},
                                {"start_seconds", seconds(r.start - t0_)},
                                {"end_seconds", seconds(r.end - t0_)}});
    }
    std::string why;
    if (r.outcome == Outcome::Corrupt || r.outcome == Outcome::Stuck) {
      why = outcome;
    } else if (r.outcome == Outcome::Failed) {
      if (faults_allowed && in_fault_window(r)) {
        ++t.failed_by_fault;
      } else {
        why = "failed outside any fault window";
      }
    }
    if (!why.empty()) {
      // Every one is a violation; the first 20 are named.
      if (++reported <= 20) {
        violation(std::string(phase) + " tunnel " + std::to_string(p.index) + " (" +
                  to_string(p.kind) + " via " + to_string(p.path) + ", " + std::to_string(p.bytes) +
                  " bytes, seed " + std::to_string(p.seed) + ") " + why + ": " + r.error);
      } else {
        violations_.push_back(std::string(phase) + " tunnel " + std::to_string(p.index) + " " +
                              why);
      }
    }
  }
  if (reported > 20) {
    std::fprintf(stderr, "konn-soak: ... and %d more bad tunnels in %s\n", reported - 20, phase);
  }
  return t;
}

// One fault: SIGKILL a daemon other than server-grpc and agent-1, leave it down a random while
// (the load goes on), then restart it while new tunnels wait, until the fleet is whole again
// and the restarted daemon is idle; its descriptors and RSS there are its own idle point.
void Soak::inject_fault(Load& load, std::mt19937_64& rng) {
  std::vector<size_t> killable;
  for (size_t i = 0; i < fleet_->size(); ++i) {
    if (!fleet_->record(i).persistent) killable.push_back(i);
  }
  const size_t victim = killable[rng() % killable.size()];
  const std::string name = fleet_->record(victim).name;
  Fault f;
  f.daemon = name;
  f.killed = Clock::now();
  faults_.push_back(f);  // open window while it is down
  fleet_->kill(victim);
  std::uniform_real_distribution<double> down(0.2, 2.0);
  f.down_seconds = down(rng);
  std::this_thread::sleep_for(std::chrono::duration<double>(f.down_seconds));
  load.paused = true;
  const auto slow = testsupport::kSlowFactor;
  try {
    fleet_->restart(victim);
  } catch (const std::exception& e) {
    violation("restart of " + name + " failed: " + e.what());
  }
  if (!wait_until([&] { return fleet_->connected(); }, std::chrono::seconds(30 * slow))) {
    violation("after restarting " + name + " the fleet did not reconnect within " +
              std::to_string(30 * slow) + " s");
  }
  if (!wait_until([&] { return fleet_->quiet(victim); }, std::chrono::seconds(10 * slow))) {
    violation("restarted " + name +
              " not idle while no tunnel was started: " + fleet_->busy(victim));
  }
  fleet_->take_idle(victim);
  f.back = Clock::now();
  faults_.back() = f;
  load.paused = false;
  std::printf("  fault %zu: SIGKILL %s at +%.1fs, down %.2fs, back after %.2fs; idle fds %d\n",
              faults_.size(), name.c_str(), seconds(f.killed - start_of_run_), f.down_seconds,
              seconds(f.back - f.killed), fleet_->record(victim).idle_fds);
  std::fflush(stdout);
}

Json Soak::daemon_json() const {
  Json all = Json::array();
  for (size_t i = 0; i < fleet_->size(); ++i) {
    const DaemonRecord& r = fleet_->record(i);
    all.push_back({{"name", r.name},
                   {"persistent", r.persistent},
                   {"starts", r.starts},
                   {"idle_fds", r.idle_fds},
                   {"end_fds", r.end_fds},
                   {"idle_rss_kib", r.idle_rss_kib},
                   {"end_rss_kib", r.end_rss_kib},
                   {"peak_rss_kib", r.peak_rss_kib},
                   {"idle_threads", r.idle_threads},
                   {"end_threads", r.end_threads}});
  }
  return all;
}

Json tally_json(const Tally& t) {
  return {{"outcomes", t.outcomes},
          {"by_kind", t.by_kind},
          {"by_path", t.by_path},
          {"bytes_verified", t.bytes_verified},
          {"failed_by_fault", t.failed_by_fault},
          {"longest_tunnel_seconds", t.longest_tunnel_s},
          {"not_verified", t.not_verified}};
}

void print_tally(const char* phase, const Tally& t, double secs) {
  std::printf(
      "%s: %d tunnels in %.1f s, %.1f MB verified\n", phase,
      [&] {
        int n = 0;
        for (auto& [k, v] : t.outcomes) n += v;
        return n;
      }(),
      secs, static_cast<double>(t.bytes_verified) / 1e6);
  for (auto& [kind, outcomes] : t.by_kind) {
    std::printf("  %-12s", kind.c_str());
    for (auto& [o, n] : outcomes) std::printf(" %s=%d", o.c_str(), n);
    std::printf("\n");
  }
  for (auto& [path, outcomes] : t.by_path) {
    std::printf("  via %-8s", path.c_str());
    for (auto& [o, n] : outcomes) std::printf(" %s=%d", o.c_str(), n);
    std::printf("\n");
  }
  std::printf("  failed during a fault: %d; longest tunnel %.1f s\n", t.failed_by_fault,
              t.longest_tunnel_s);
}

int Soak::run() {
  if (o_.seed == 0) o_.seed = static_cast<int64_t>(std::random_device()() | 1ULL << 20);
  rng_.seed(static_cast<uint64_t>(o_.seed));
  std::mt19937_64 fault_rng(static_cast<uint64_t>(o_.seed) ^ 0xfa017ULL);
  if (o_.warmup <= 0) o_.warmup = std::max(200, o_.tunnels / 10);
  const auto slow = testsupport::kSlowFactor;
  const auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(o_.tunnel_timeout) *
                     static_cast<int64_t>(slow);
  std::printf(
      "konn-soak: seed %lld (replay with --seed=%lld): %d tunnels over %.0f s, "
      "concurrency %d, warm-up %d, %d agents, faults %s%s\n",
      static_cast<long long>(o_.seed), static_cast<long long>(o_.seed), o_.tunnels,
      seconds(o_.duration), o_.concurrency, o_.warmup, o_.agents, o_.faults ? "on" : "off",
      testsupport::kSanitizerBuild ? " (sanitizer build: RSS not checked)" : "");
  std::fflush(stdout);
  raise_fd_limit();

  const Clock::time_point t_begin = Clock::now();
  bench::DestinationOptions dopts;
  dopts.threads = 1;
  bench::Destination destination(dopts);
  const std::string target = "127.0.0.1:" + std::to_string(destination.port());
  fleet_ = std::make_unique<SoakFleet>(testsupport::test_certs(), o_.agents, o_.daemon_log_level);
  if (!wait_until([&] { return fleet_->connected(); }, std::chrono::seconds(30 * slow))) {
    violation("the fleet did not connect");
    fleet_->copy_logs(o_.logs.empty() ? "/tmp/konn-soak-" + std::to_string(o_.seed) : o_.logs);
    return 1;
  }
  bench::Via grpc_via;
  grpc_via.kind = bench::Via::Kind::GrpcUnix;
  grpc_via.path = fleet_->grpc_socket();
  grpc_via.grpc_channels = o_.grpc_channels;
  bench::Via connect_via;
  connect_via.kind = bench::Via::Kind::ConnectUnix;
  connect_via.path = fleet_->connect_socket();
  bench::Opener grpc(grpc_via);
  bench::Opener connect(connect_via);

  // Warm-up: the same mix at full concurrency, no faults, so allocator pools, gRPC and the
  // queues have seen a load like the run's before the idle point is taken.
  Load warm(grpc, connect, target, o_.client_threads, limit);
  const Clock::time_point t_warm = Clock::now();
  warm.start(draw(o_.warmup, 0), Clock::duration::zero(), o_.concurrency);
  while (!warm.done(1s)) fleet_->sample_peaks();
  warm.stop();
  const double warm_s = seconds(Clock::now() - t_warm);
  const Tally warm_tally = tally(warm, false, "warm-up");
  print_tally("warm-up", warm_tally, warm_s);
  auto all_quiet = [&] {
    for (size_t i = 0; i < fleet_->size(); ++i) {
      if (!fleet_->quiet(i)) return false;
    }
    return destination.open_connections() == 0;
  };
  if (!wait_until(all_quiet, std::chrono::seconds(10 * slow))) {
    std::string why;
    for (size_t i = 0; i < fleet_->size(); ++i) {
      const std::string b = fleet_->busy(i);
      if (!b.empty()) why += " " + fleet_->record(i).name + ": " + b + ";";
    }
    if (destination.open_connections() != 0) {
      why += " destination: " + std::to_string(destination.open_connections()) + " open;";
    }
    violation("the fleet was not idle 10 s after the warm-up:" + why);
  }
  std::this_thread::sleep_for(kQuietBeforeSample);
  for (size_t i = 0; i < fleet_->size(); ++i) fleet_->take_idle(i);

  // The run: paced over the duration, faults from their own seeded RNG.
  Load load(grpc, connect, target, o_.client_threads, limit);
  const Clock::duration interval = o_.duration / std::max(1, o_.tunnels);
  start_of_run_ = Clock::now();
  load.start(draw(o_.tunnels, o_.warmup), interval, o_.concurrency);
  std::exponential_distribution<double> gap(10.0 / seconds(o_.duration));  // ~10 per run
  auto next_fault = start_of_run_ + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(gap(fault_rng) + 1.0));
  const Clock::time_point last_fault_at = start_of_run_ + o_.duration * 9 / 10;
  const Clock::time_point overrun = start_of_run_ + o_.duration * 2 + limit * 2;
  Clock::time_point next_progress = start_of_run_ + 10s;
  bool overran = false;
  while (!load.done(50ms)) {
    const Clock::time_point now = Clock::now();
    fleet_->sample_peaks();
    if (o_.faults && now >= next_fault && now < last_fault_at) {
      inject_fault(load, fault_rng);
      next_fault = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(gap(fault_rng)));
    }
    if (now >= next_progress) {
      std::printf("  +%.0fs: %d started, %d in flight, load %s\n", seconds(now - start_of_run_),
                  load.started(), load.in_flight(), load_average().c_str());
      std::fflush(stdout);
      next_progress += 10s;
    }
    if (now >= overrun) {
      overran = true;
      break;
    }
  }
  const double run_s = seconds(Clock::now() - start_of_run_);
  if (overran) {
    violation("the run overran its bound (" + std::to_string(seconds(overrun - start_of_run_)) +
              " s): " + std::to_string(load.in_flight()) + " tunnels still open, " +
              std::to_string(o_.tunnels - load.started()) + " not started");
  }
  load.stop();
  const Tally run_tally = tally(load, true, "run");
  print_tally("run", run_tally, run_s);

  // Settle: wait (bounded) until the gauges, descriptors and the destination are back to idle.
  const Clock::time_point t_settle = Clock::now();
  std::vector<GaugeCheck> gauges;
  auto settled = [&] {
    gauges = fleet_->end_gauges();
    for (const auto& g : gauges) {
      if (!g.ok()) return false;
    }
    for (size_t i = 0; i < fleet_->size(); ++i) {
      const DaemonRecord& r = fleet_->record(i);
      if (count_fds(r.pid) != r.idle_fds) return false;
    }
    return destination.open_connections() == 0;
  };
  wait_until(settled, o_.settle * slow);
  std::this_thread::sleep_for(kQuietBeforeSample);
  const double settle_s = seconds(Clock::now() - t_settle);
  gauges = fleet_->end_gauges();
  for (size_t i = 0; i < fleet_->size(); ++i) {
    DaemonRecord& r = fleet_->record(i);
    r.end_fds = count_fds(r.pid);
    r.end_rss_kib = rss_kib(r.pid);
    r.end_threads = thread_count(r.pid);
  }

  // Checks.
  for (const auto& g : gauges) {
    if (!g.ok()) {
      std::string labels;
      for (const auto& [k, v] : g.labels) labels += (labels.empty() ? "" : ",") + k + "=" + v;
      violation(g.daemon + " " + g.name + "{" + labels + "} = " + std::to_string(g.got) +
                ", want " + std::to_string(g.want));
    }
  }
  for (size_t i = 0; i < fleet_->size(); ++i) {
    const DaemonRecord& r = fleet_->record(i);
    if (r.end_fds < 0) {
      violation(r.name + " is not running at the end (pid " + std::to_string(r.pid) + ")");
      continue;
    }
    if (r.end_fds != r.idle_fds) {
      violation(r.name + " has " + std::to_string(r.end_fds) + " descriptors, " +
                std::to_string(r.idle_fds) + " when idle" +
                (r.starts > 1 ? " after its last restart" : " after warm-up") + ": " +
                fd_diff(r.idle_fd_kinds, fd_kinds(r.pid)));
    }
    if (r.persistent && o_.rss_check && !testsupport::kSanitizerBuild && r.idle_rss_kib > 0) {
      const double ratio = static_cast<double>(r.end_rss_kib) / static_cast<double>(r.idle_rss_kib);
      if (ratio > 1.10 || ratio < 0.90) {
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      "%s RSS %ld KiB is %.1f%% of its %ld KiB after warm-up "
                      "(bound: within 10%%)",
                      r.name.c_str(), r.end_rss_kib, ratio * 100, r.idle_rss_kib);
        violation(buf);
      }
    }
  }
  if (destination.open_connections() != 0) {
    violation("the destination still has " + std::to_string(destination.open_connections()) +
              " connections open");
  }
  if (o_.faults && faults_.empty()) violation("no fault was injected");
  if (load.started() != o_.tunnels) {
    violation(std::to_string(o_.tunnels - load.started()) + " tunnels were never started");
  }

  // Summary.
  const double paused_server = fleet_->sum_counter(
      true, "konnectivity_network_proxy_server_reads_paused_total", {{"reason", "queue_full"}});
  const double paused_credit = fleet_->sum_counter(
      true, "konnectivity_network_proxy_server_reads_paused_total", {{"reason", "no_credit"}});
  const double agent_pauses = fleet_->sum_counter(false, "konn_agent_read_pauses_total");
  const double over_cap =
      fleet_->sum_counter(true, "konnectivity_network_proxy_server_tunnels_over_cap_total");
  std::printf("faults: %zu injected\n", faults_.size());
  std::printf(
      "backpressure: server reads paused queue_full=%.0f no_credit=%.0f, agent read "
      "pauses %.0f, tunnels over cap %.0f (daemons' current lives)\n",
      paused_server, paused_credit, agent_pauses, over_cap);
  std::printf("%-15s %6s %8s %8s %12s %12s %12s %8s %7s\n", "daemon", "starts", "idle fd", "end fd",
              "idle RSS KiB", "end RSS KiB", "peak RSS KiB", "threads", "end/idle");
  for (size_t i = 0; i < fleet_->size(); ++i) {
    const DaemonRecord& r = fleet_->record(i);
    const std::string threads =
        std::to_string(r.idle_threads) + "/" + std::to_string(r.end_threads);
    std::printf(
        "%-15s %6d %8d %8d %12ld %12ld %12ld %8s %6.1f%%\n", r.name.c_str(), r.starts, r.idle_fds,
        r.end_fds, r.idle_rss_kib, r.end_rss_kib, r.peak_rss_kib, threads.c_str(),
        r.idle_rss_kib > 0
            ? 100.0 * static_cast<double>(r.end_rss_kib) / static_cast<double>(r.idle_rss_kib)
            : 0.0);
  }
  std::printf("gauges checked after the settle (%.1f s): %zu, %zu wrong\n", settle_s, gauges.size(),
              static_cast<size_t>(std::count_if(gauges.begin(), gauges.end(),
                                                [](const GaugeCheck& g) { return !g.ok(); })));
  const std::string loadavg = load_average();
  const double total_s = seconds(Clock::now() - t_begin);
  std::printf("load average %s; whole run %.0f s\n", loadavg.c_str(), total_s);

  if (!o_.json.empty()) {
    Json faults = Json::array();
    for (const auto& f : faults_) {
      faults.push_back({{"daemon", f.daemon},
                        {"at_seconds", seconds(f.killed - t0_)},
                        {"down_seconds", f.down_seconds},
                        {"back_after_seconds", seconds(f.back - f.killed)}});
    }
    Json g = Json::array();
    for (const auto& c : gauges) {
      g.push_back({{"daemon", c.daemon},
                   {"name", c.name},
                   {"labels", c.labels},
                   {"want", c.want},
                   {"got", c.got}});
    }
    Json out{{"seed", o_.seed},
             {"tunnels", o_.tunnels},
             {"duration_seconds", seconds(o_.duration)},
             {"concurrency", o_.concurrency},
             {"agents", o_.agents},
             {"sanitizer_build", testsupport::kSanitizerBuild},
             {"warmup", tally_json(warm_tally)},
             {"warmup_seconds", warm_s},
             {"run", tally_json(run_tally)},
             {"run_seconds", run_s},
             {"settle_seconds", settle_s},
             {"total_seconds", total_s},
             {"faults", faults},
             {"daemons", daemon_json()},
             {"gauges", g},
             {"backpressure",
              {{"server_reads_paused_queue_full", paused_server},
               {"server_reads_paused_no_credit", paused_credit},
               {"agent_read_pauses", agent_pauses},
               {"server_tunnels_over_cap", over_cap}}},
             {"load_average", loadavg},
             {"violations", violations_}};
    std::ofstream(o_.json) << out.dump(2) << "\n";
  }
  std::string logs = o_.logs;
  if (logs.empty() && !violations_.empty()) logs = "/tmp/konn-soak-" + std::to_string(o_.seed);
  if (!logs.empty()) {
    fleet_->copy_logs(logs);
    std::printf("daemon logs copied to %s\n", logs.c_str());
  }
  if (violations_.empty()) {
    std::printf("konn-soak: PASSED (seed %lld)\n", static_cast<long long>(o_.seed));
    return 0;
  }
  std::printf("konn-soak: FAILED (seed %lld), %zu violations:\n", static_cast<long long>(o_.seed),
              violations_.size());
  for (const auto& v : violations_) std::printf("  - %s\n", v.c_str());
  return 1;
}

}  // namespace
}  // namespace konn::soak

int main(int argc, char** argv) {
  konn::soak::Options o;
  konn::core::config::FlagParser flags("konn-soak", "fault and soak test of the tunnel daemons");
  flags.add("tunnels", &o.tunnels, "tunnels in the run (after the warm-up)");
  flags.add("duration", &o.duration, "time the run's tunnel starts are spread over");
  flags.add("seed", &o.seed, "RNG seed of tunnels and faults (0: draw one; printed)");
  flags.add("concurrency", &o.concurrency, "tunnels open at once at most");
  flags.add("warmup", &o.warmup, "warm-up tunnels (0: max(200, tunnels/10))");
  flags.add("agents", &o.agents, "proxy-agents (agent-1 is never killed); at least 2");
  flags.add("faults", &o.faults, "SIGKILL and restart daemons during the run");
  flags.add("rss-check", &o.rss_check,
            "fail when server-grpc's or agent-1's RSS is not within 10% of its warm-up value");
  flags.add("client-threads", &o.client_threads, "client io threads");
  flags.add("grpc-channels", &o.grpc_channels, "HTTP/2 connections to the gRPC frontend");
  flags.add("tunnel-timeout", &o.tunnel_timeout, "a tunnel not done by then is stuck");
  flags.add("settle", &o.settle, "longest wait for the daemons to be idle after the run");
  flags.add("daemon-log-level", &o.daemon_log_level, "the daemons' --v (info, debug, trace)");
  flags.add("json", &o.json, "write the results as JSON to this file");
  flags.add("logs", &o.logs, "copy the daemon logs to this directory (on a violation: always)");
  auto parsed = flags.parse(argc, argv);
  if (parsed.exit_now || !parsed.errors.empty()) {
    for (const auto& e : parsed.errors) std::fprintf(stderr, "konn-soak: %s\n", e.c_str());
    std::fputs(parsed.output.c_str(), stderr);
    return parsed.exit_now ? 0 : 2;
  }
  if (o.agents < 2 || o.tunnels < 1 || o.concurrency < 1) {
    std::fprintf(stderr, "konn-soak: need --agents >= 2, --tunnels >= 1, --concurrency >= 1\n");
    return 2;
  }
  try {
    konn::soak::Soak soak(o);
    return soak.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "konn-soak: FAILED: %s\n", e.what());
    return 1;
  }
}
