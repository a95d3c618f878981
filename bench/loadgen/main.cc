// konn-loadgen: the benchmark's one load generator (bench/run-all.sh drives it; see
// bench/loadgen/README.md). `serve` is the destination; every other mode is a client that reaches
// the destination directly or through the proxy under test and prints one JSON object.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <sys/resource.h>

#include "bench/loadgen/destination.h"
#include "bench/loadgen/workloads.h"
#include "core/config/flag_parser.h"
#include "core/io/allocator.h"
#include "core/io/shutdown.h"

namespace {

constexpr const char* kUsage =
    "usage: konn-loadgen serve|bulk|rr|dials|hold|hol [flags]  (--help after the mode)";

// Tens of thousands of sockets: lift the soft descriptor limit to the hard one.
void raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // As the daemons: a client standing in for kube-apiserver (Go, whose allocator keeps its
  // buffers) must not spend its time page-faulting 256 KiB DATA buffers back in.
  konn::core::io::ignore_broken_pipe_signal();
  konn::core::io::tune_allocator_for_relaying();
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
  }
  const std::string mode = argv[1];
  raise_fd_limit();
  konn::core::config::FlagParser flags("konn-loadgen " + mode, "benchmark load generator");
  konn::bench::DestinationOptions dest;
  konn::bench::WorkloadOptions o;
  std::string via = "direct";
  konn::core::config::Duration duration = std::chrono::seconds(3);
  int64_t chunk = static_cast<int64_t>(dest.chunk);
  if (mode == "serve") {
    flags.add("bind", &dest.bind, "address to listen on");
    flags.add("port", &dest.port, "port (0: any; printed)");
    flags.add("threads", &dest.threads, "io threads");
    flags.add("chunk", &chunk, "bytes per write when sending");
  } else {
    flags.add("via", &via,
              "direct, socks5://H:P, connect://H:P, connect+unix:///P, grpc+unix:///P");
    flags.add("grpc-channels", &o.via.grpc_channels,
              "grpc+unix: HTTP/2 connections to spread over");
    flags.add("target", &o.target, "destination IPv4:port (konn-loadgen serve)");
    flags.add("threads", &o.threads, "client io threads");
    flags.add("direction", &o.direction, "bulk: down or up");
    flags.add("streams", &o.streams, "bulk: parallel streams");
    flags.add("bytes", &o.bytes, "bulk: bytes in all (split over the streams)");
    flags.add("tunnels", &o.tunnels, "rr: concurrent tunnels; hol: downloading tunnels");
    flags.add("size", &o.size, "rr, dials --request, hol: bytes per request");
    flags.add("duration", &duration, "rr, dials, hol: how long to measure (Go syntax: 3s, 500ms)");
    flags.add("concurrency", &o.concurrency, "dials: concurrent dialers; hold: opened at once");
    flags.add("request", &o.request, "dials: one echo request per tunnel");
    flags.add("count", &o.count, "hold: streams to hold open");
    flags.add("http-get", &o.http_get, "hold: GET this path on each connection first");
  }
  auto parsed = flags.parse(argc - 1, argv + 1);
  if (parsed.exit_now || !parsed.errors.empty()) {
    for (const auto& e : parsed.errors) std::fprintf(stderr, "konn-loadgen: %s\n", e.c_str());
    std::fputs(parsed.output.c_str(), stderr);
    return parsed.exit_now ? 0 : 2;
  }
  try {
    if (mode == "serve") {
      dest.chunk = static_cast<size_t>(chunk);
      return konn::bench::run_destination(dest);
    }
    const int grpc_channels = o.via.grpc_channels;
    o.via = konn::bench::Via::parse(via);
    o.via.grpc_channels = grpc_channels;
    o.seconds = std::chrono::duration<double>(duration).count();
    if (o.target.empty()) throw std::invalid_argument("--target is required");
    nlohmann::json result;
    if (mode == "bulk") {
      result = konn::bench::run_bulk(o);
    } else if (mode == "rr") {
      result = konn::bench::run_round_trips(o);
    } else if (mode == "dials") {
      result = konn::bench::run_dials(o);
    } else if (mode == "hold") {
      result = konn::bench::run_hold(o);
    } else if (mode == "hol") {
      result = konn::bench::run_head_of_line(o);
    } else {
      std::fprintf(stderr, "%s\n", kUsage);
      return 2;
    }
    std::cout << result.dump() << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "konn-loadgen %s: FAILED: %s\n", mode.c_str(), e.what());
    return 1;
  }
}
