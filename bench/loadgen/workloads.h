#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/loadgen/stream.h"

namespace konn::bench {

// What `konn-loadgen <workload>` was asked to do. Every workload checks every byte it moves
// (pattern or echo) and fails with a message on the first wrong, missing or extra byte.
struct WorkloadOptions {
  Via via;
  std::string target;  // the destination (or, for hold --http-get, the HTTP server), "IPv4:port"
  int threads = 1;     // client io_contexts
  // bulk
  std::string direction = "down";  // down: destination → client; up: client → destination
  int streams = 1;
  int64_t bytes = int64_t{1} << 30;  // in all, split over the streams
  // rr, dials, hol
  int tunnels = 1;
  int size = 64;
  double seconds = 3;
  int concurrency = 1;
  bool request = false;
  // hold
  int count = 1000;
  std::string http_get;  // hold: send this GET on each connection and read the answer first
};

// Each returns the result as JSON; throws std::runtime_error on a failure (wrong bytes, refused
// dial, early EOF). Exception: this is a bench tool, a failure ends the run loudly.
nlohmann::json run_bulk(const WorkloadOptions& o);
nlohmann::json run_round_trips(const WorkloadOptions& o);
nlohmann::json run_dials(const WorkloadOptions& o);
// Opens o.count idle streams, prints {"event":"ready",...} on stdout, waits for a line (or EOF)
// on stdin, closes them all and returns {"event":"closed",...}.
nlohmann::json run_hold(const WorkloadOptions& o);
// Head-of-line: o.tunnels download streams and one round-trip stream measured for o.seconds,
// then again while one more stream's reader has stopped.
nlohmann::json run_head_of_line(const WorkloadOptions& o);

}  // namespace konn::bench
