// konn-fleet-sim: a fleet of simulated Konnectivity agents in one process (or a few shards), or a
// frontend load of many tunnels (issue 42). See bench/fleet/README.md.

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <asio/ssl/context.hpp>

#include "bench/fleet/fleet_sim.h"
#include "bench/fleet/frontend_load.h"
#include "core/h2/transport.h"
#include "core/log/logger.h"

namespace fleet = konn::bench::fleet;
using std::chrono::milliseconds;

namespace {

constexpr char kUsage[] = R"(usage:
  konn-fleet-sim [agents] --server=HOST:PORT --agents=N [options]
      --ca-cert=F --cert=F --key=F     TLS: CA of the server, client certificate and key
      --service-account-token-path=F  send "authorization: Bearer <token>" (upstream's flag)
      --plaintext                     h2c instead of TLS (tests)
      --first-index=I                 agent i is id <prefix><i>, host=node-<i>, ipv4 10.x.y.z
      --id-prefix=S                   (default fleet-)
      --shards=S                      fork S processes, each holding N/S agents
      --threads=T                     io threads per process (default 1)
      --source-addrs=A,B,...          bind agent i to address i % count (e.g. 127.0.0.1,127.0.0.2)
      --ramp=R                        agents started per second (default 5000; 0: all at once)
      --sync-interval=MS --sync-interval-cap=MS   upstream's backoff (default 1000, 10000)
      --keepalive=MS                  PING interval (default 0: none, upstream's is 1 h)
      --dial-real                     DIAL_REQ dials the address (default: echo in process)
      --report-interval=MS            a JSON line of counters on stdout (default 1000)
      --duration=S                    stop after S seconds (default: until SIGTERM/SIGINT)
    SIGUSR1 makes every agent send DRAIN.
  Both modes: --log-level=L (default warn: the h2 library's per-connection lines are quiet).
  konn-fleet-sim frontend --uds=PATH --tunnels=N [options]
      --per-conn=K                    tunnels per HTTP/2 connection (default 1)
      --concurrency=C                 dials in flight (default 256)
      --dest=HOST:PORT                every DIAL_REQ's address (default 127.0.0.1:80)
      --dest-prefix=P --dest-count=M  address P<r>:80, r uniform in [0, M) (destHost routing)
      --active=A --round-trips=R --payload=B   A tunnels make R echo round trips of B bytes
      --churn                         close each tunnel once its dial answered (dial latency)
      --interval=MS                   start at most one dial per MS (a steady trickle)
      --dial-timeout=MS               a dial unanswered this long times out (default 30000, as
                                      konnectivity-client's backstop)
      --wait-stdin                    after opening, wait for a line on stdin before closing
    One JSON line per step: {"event":"open"...}, {"event":"rtt"...}, {"event":"closed"...}.
)";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "konn-fleet-sim: %s\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

struct Flags {
  std::map<std::string, std::string> v;
  std::set<std::string> used;
  bool has(const std::string& k) {
    used.insert(k);
    return v.count(k) != 0;
  }
  std::string str(const std::string& k, const std::string& d = {}) {
    used.insert(k);
    auto it = v.find(k);
    return it == v.end() ? d : it->second;
  }
  uint64_t num(const std::string& k, uint64_t d) {
    used.insert(k);
    auto it = v.find(k);
    if (it == v.end()) return d;
    char* end = nullptr;
    const unsigned long long n = std::strtoull(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end != '\0') usage_error("--" + k + ": not a number: " + it->second);
    return n;
  }
  void check_all_used() {
    for (auto& [k, val] : v) {
      if (!used.count(k)) usage_error("unknown flag --" + k);
    }
  }
};

void emit(const std::string& line) {
  std::string l = line + "\n";
  // One write per line: shards share the descriptor, and a line stays whole (< PIPE_BUF).
  (void)!::write(1, l.data(), l.size());
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) usage_error("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

int run_agents(Flags& f) {
  const std::string server = f.str("server");
  if (server.empty()) usage_error("--server=HOST:PORT is required");
  const size_t colon = server.rfind(':');
  if (colon == std::string::npos) usage_error("--server: HOST:PORT expected, got " + server);
  fleet::AgentConfig cfg;
  cfg.server_host = server.substr(0, colon);
  if (cfg.server_host == "localhost") cfg.server_host = "127.0.0.1";
  cfg.server_port = static_cast<uint16_t>(std::atoi(server.c_str() + colon + 1));
  const uint64_t n = f.num("agents", 1);
  const uint64_t first = f.num("first-index", 0);
  const std::string prefix = f.str("id-prefix", "fleet-");
  const uint64_t shards = std::max<uint64_t>(1, f.num("shards", 1));
  const uint64_t threads = std::max<uint64_t>(1, f.num("threads", 1));
  const uint64_t ramp = f.num("ramp", 5000);
  const milliseconds report(f.num("report-interval", 1000));
  const uint64_t duration = f.num("duration", 0);
  cfg.backoff_initial = milliseconds(f.num("sync-interval", 1000));
  cfg.backoff_cap = milliseconds(f.num("sync-interval-cap", 10000));
  cfg.keepalive = milliseconds(f.num("keepalive", 0));
  cfg.dial_real = f.has("dial-real");
  std::vector<std::string> sources;
  {
    std::stringstream ss(f.str("source-addrs"));
    std::string a;
    while (std::getline(ss, a, ',')) {
      if (!a.empty()) sources.push_back(a);
    }
  }
  const std::string token_path = f.str("service-account-token-path");
  if (!token_path.empty()) cfg.token = read_file(token_path);
  const bool plaintext = f.has("plaintext");
  const std::string ca = f.str("ca-cert"), cert = f.str("cert"), key = f.str("key");
  f.check_all_used();
  if (!plaintext) {
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
    try {
      if (!ca.empty()) {
        ctx->load_verify_file(ca);
        ctx->set_verify_mode(asio::ssl::verify_peer);
      }
      if (!cert.empty()) ctx->use_certificate_chain_file(cert);
      if (!key.empty()) ctx->use_private_key_file(key, asio::ssl::context::pem);
    } catch (const std::exception& e) {
      usage_error(std::string("TLS files: ") + e.what());
    }
    // Exactly the certificates of the file, as upstream's agent (Go) sends: OpenSSL would add
    // the CA from the trust store, which the server then decodes for nothing.
    SSL_CTX_set_mode(ctx->native_handle(), SSL_MODE_RELEASE_BUFFERS | SSL_MODE_NO_AUTO_CHAIN);
    cfg.tls = ctx;
  }

  // Shards: fork, each child holds its slice; the parent forwards signals and waits.
  uint64_t shard = 0, begin = first, count = n;
  std::vector<pid_t> children;
  sigset_t sigs;
  sigemptyset(&sigs);
  for (int s : {SIGTERM, SIGINT, SIGUSR1, SIGHUP}) sigaddset(&sigs, s);
  sigprocmask(SIG_BLOCK, &sigs, nullptr);
  if (shards > 1) {
    for (uint64_t s = 0; s < shards; ++s) {
      const uint64_t b = first + n * s / shards, e = first + n * (s + 1) / shards;
      const pid_t pid = fork();
      if (pid == 0) {
        shard = s;
        begin = b;
        count = e - b;
        children.clear();
        break;
      }
      children.push_back(pid);
    }
    if (!children.empty()) {
      // The parent.
      size_t alive = children.size();
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(duration);
      while (alive > 0) {
        timespec ts{0, 100 * 1000 * 1000};
        const int sig = sigtimedwait(&sigs, nullptr, &ts);
        if (sig > 0) {
          for (pid_t c : children) kill(c, sig);
        }
        if (duration && std::chrono::steady_clock::now() > end + std::chrono::seconds(5)) {
          for (pid_t c : children) kill(c, SIGKILL);
        }
        int st = 0;
        while (waitpid(-1, &st, WNOHANG) > 0) --alive;
      }
      return 0;
    }
  }

  fleet::Counters counters;
  std::vector<std::unique_ptr<asio::io_context>> ios;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
  for (uint64_t t = 0; t < threads; ++t) {
    ios.push_back(std::make_unique<asio::io_context>(1));
    guards.push_back(asio::make_work_guard(*ios.back()));
  }
  std::vector<std::shared_ptr<fleet::SimAgent>> agents;
  agents.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t idx = begin + i;
    agents.push_back(std::make_shared<fleet::SimAgent>(
        *ios[i % threads], cfg, prefix + std::to_string(idx), fleet::agent_identifiers(idx),
        sources.empty() ? std::string() : sources[idx % sources.size()], counters,
        0x9e3779b97f4a7c15ULL * (idx + 1)));
  }
  std::vector<std::thread> workers;
  for (uint64_t t = 0; t < threads; ++t) {
    workers.emplace_back([&ios, t] { ios[t]->run(); });
  }
  const auto t0 = std::chrono::steady_clock::now();
  // The ramp: agents start at `ramp` a second (a fleet's nodes do not boot in one instant).
  std::thread starter([&] {
    for (uint64_t i = 0; i < count; ++i) {
      auto a = agents[i];
      asio::post(*ios[i % threads], [a] { a->start(); });
      if (ramp > 0 && (i + 1) % std::max<uint64_t>(1, ramp / 100) == 0) {
        std::this_thread::sleep_until(t0 + milliseconds((i + 1) * 1000 / ramp));
      }
    }
  });
  auto line = [&] {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "{\"shard\":%llu,\"t\":%.3f,\"agents\":%llu,\"connected\":%llu,\"connects\":%llu,"
                  "\"reconnects\":%llu,\"connect_failures\":%llu,\"handshakes\":%llu,"
                  "\"dials\":%llu,\"dial_failures\":%llu,\"tunnels_open\":%llu,\"data\":%llu,"
                  "\"closes\":%llu,\"drains\":%llu}",
                  static_cast<unsigned long long>(shard), t, static_cast<unsigned long long>(count),
                  static_cast<unsigned long long>(counters.connected.load()),
                  static_cast<unsigned long long>(counters.connects.load()),
                  static_cast<unsigned long long>(counters.reconnects.load()),
                  static_cast<unsigned long long>(counters.connect_failures.load()),
                  static_cast<unsigned long long>(counters.handshakes.load()),
                  static_cast<unsigned long long>(counters.dials.load()),
                  static_cast<unsigned long long>(counters.dial_failures.load()),
                  static_cast<unsigned long long>(counters.tunnels_open.load()),
                  static_cast<unsigned long long>(counters.data_packets.load()),
                  static_cast<unsigned long long>(counters.closes.load()),
                  static_cast<unsigned long long>(counters.drains.load()));
    emit(buf);
  };
  auto next = std::chrono::steady_clock::now() + report;
  bool stop = false;
  while (!stop) {
    const auto now = std::chrono::steady_clock::now();
    if (duration && now - t0 > std::chrono::seconds(duration)) break;
    const auto wait = next > now ? next - now : std::chrono::nanoseconds(0);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    const int sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig == SIGUSR1) {
      for (uint64_t i = 0; i < count; ++i) {
        auto a = agents[i];
        asio::post(*ios[i % threads], [a] { a->drain(); });
      }
    } else if (sig > 0) {
      stop = true;
    }
    if (std::chrono::steady_clock::now() >= next) {
      line();
      next += report;
    }
  }
  starter.join();
  for (uint64_t i = 0; i < count; ++i) {
    auto a = agents[i];
    asio::post(*ios[i % threads], [a] { a->stop(); });
  }
  for (auto& g : guards) g.reset();
  // Stopped agents hold no pending operation but their closing connections' handlers.
  for (uint64_t t = 0; t < threads; ++t) {
    asio::post(*ios[t], [io = ios[t].get()] {
      auto timer = std::make_shared<asio::steady_timer>(*io, milliseconds(500));
      timer->async_wait([io, timer](std::error_code) { io->stop(); });
    });
  }
  for (auto& w : workers) w.join();
  line();
  agents.clear();
  return 0;
}

std::string json_latency(const char* name, const fleet::Latencies& l) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "\"%s_n\":%zu,\"%s_p50_us\":%.1f,\"%s_p99_us\":%.1f", name,
                l.us.size(), name, l.percentile(50), name, l.percentile(99));
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o.push_back('\\');
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o.push_back(c);
  }
  return o;
}

int run_frontend(Flags& f) {
  fleet::FrontendConfig cfg;
  cfg.uds = f.str("uds");
  if (cfg.uds.empty()) usage_error("frontend: --uds=PATH is required");
  cfg.tunnels = f.num("tunnels", 1000);
  cfg.streams_per_conn = std::max<uint64_t>(1, f.num("per-conn", 1));
  cfg.concurrency = std::max<uint64_t>(1, f.num("concurrency", 256));
  cfg.active = f.num("active", 0);
  cfg.round_trips = f.num("round-trips", 10);
  cfg.payload = f.num("payload", 64);
  cfg.churn = f.has("churn");
  cfg.interval = milliseconds(f.num("interval", 0));
  cfg.dial_timeout = milliseconds(f.num("dial-timeout", 30000));
  const bool wait_stdin = f.has("wait-stdin");
  const std::string dest = f.str("dest", "127.0.0.1:80");
  const std::string prefix = f.str("dest-prefix");
  const uint64_t dest_count = f.num("dest-count", 1);
  const uint64_t seed = f.num("seed", 1);
  f.check_all_used();
  if (prefix.empty()) {
    cfg.address = [dest](uint64_t) { return dest; };
  } else {
    auto rng = std::make_shared<std::mt19937_64>(seed);
    cfg.address = [prefix, dest_count, rng](uint64_t) {
      return prefix + std::to_string((*rng)() % std::max<uint64_t>(1, dest_count)) + ":80";
    };
  }
  asio::io_context io(1);
  fleet::FrontendLoad load(io, cfg);
  fleet::FrontendResult r = load.open();
  {
    char buf[256];
    std::snprintf(
        buf, sizeof buf,
        "{\"event\":\"open\",\"tunnels\":%llu,\"opened\":%llu,\"failed\":%llu,"
        "\"timed_out\":%llu,\"connections\":%llu,\"open_s\":%.3f,",
        static_cast<unsigned long long>(cfg.tunnels), static_cast<unsigned long long>(r.opened),
        static_cast<unsigned long long>(r.failed), static_cast<unsigned long long>(r.timed_out),
        static_cast<unsigned long long>(r.connections), r.open_seconds);
    emit(std::string(buf) + json_latency("dial", r.dial) + "," +
         json_latency("dial_failed", r.dial_failed) + ",\"first_error\":\"" +
         json_escape(r.first_error) + "\"}");
  }
  if (cfg.active > 0 && !cfg.churn) {
    load.round_trips(r);
    char buf[128];
    std::snprintf(buf, sizeof buf, "{\"event\":\"rtt\",\"failed\":%llu,",
                  static_cast<unsigned long long>(r.rtt_failed));
    emit(std::string(buf) + json_latency("rtt", r.round_trip) + "}");
  }
  if (wait_stdin) {
    std::string l;
    std::getline(std::cin, l);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t clean = cfg.churn ? r.opened : load.close_all();
  char buf[128];
  std::snprintf(buf, sizeof buf, "{\"event\":\"closed\",\"clean\":%llu,\"close_s\":%.3f}",
                static_cast<unsigned long long>(clean),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  emit(buf);
  if (wait_stdin) {
    std::string l;
    std::getline(std::cin, l);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  std::string mode = "agents";
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i == 1 && a.rfind("--", 0) != 0) {
      mode = a;
      continue;
    }
    if (a.rfind("--", 0) != 0) usage_error("unexpected argument " + a);
    const size_t eq = a.find('=');
    if (eq == std::string::npos) {
      f.v[a.substr(2)] = "";
    } else {
      f.v[a.substr(2, eq - 2)] = a.substr(eq + 1);
    }
  }
  const std::string level = f.str("log-level", "warn");
  if (!konn::core::log::set_level(level)) usage_error("--log-level: unknown level " + level);
  if (mode == "agents") return run_agents(f);
  if (mode == "frontend") return run_frontend(f);
  usage_error("unknown mode " + mode + " (agents or frontend)");
}
