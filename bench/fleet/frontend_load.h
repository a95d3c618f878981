#pragma once

// The fleet's frontend load (issue 42): many concurrent ProxyService/Proxy tunnels through a
// Konnectivity server's gRPC frontend on a unix socket, K tunnels per HTTP/2 connection (K = 1:
// kube-apiserver's one connection per request).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <asio/io_context.hpp>

namespace konn::bench::fleet {

struct FrontendConfig {
  std::string uds;                // the server's frontend socket
  uint64_t tunnels = 1000;        // tunnels to open
  uint64_t streams_per_conn = 1;  // K
  uint64_t concurrency = 256;     // dials in flight at once
  // The address of tunnel i's DIAL_REQ.
  std::function<std::string(uint64_t)> address;
  uint64_t active = 0;                    // tunnels (the first ones) that make round trips
  uint64_t round_trips = 10;              // per active tunnel, one after another
  size_t payload = 64;                    // bytes per round trip
  bool churn = false;                     // close each tunnel as soon as its dial answered
  std::chrono::milliseconds interval{0};  // at most one dial started per interval (0: no pacing)
  std::chrono::milliseconds dial_timeout{30000};  // konnectivity-client's backstop
};

// Latencies in microseconds.
struct Latencies {
  std::vector<double> us;
  double percentile(double p) const;
};

struct FrontendResult {
  uint64_t opened = 0;
  uint64_t failed = 0;     // DIAL_RSP with an error, or the stream ended first
  uint64_t timed_out = 0;  // no answer within dial_timeout
  uint64_t connections = 0;
  double open_seconds = 0;
  Latencies dial;
  Latencies dial_failed;  // how long a failed dial took to fail (never: timed_out)
  Latencies round_trip;
  uint64_t rtt_failed = 0;
  std::string first_error;
};

// Drives the load on `io` (one thread). Steps, each run to its end by run_until_done():
// open() dials every tunnel (and, with churn, closes each one); round_trips(); close_all().
class FrontendLoad {
 public:
  FrontendLoad(asio::io_context& io, FrontendConfig cfg);
  ~FrontendLoad();
  FrontendResult open();
  void round_trips(FrontendResult& r);
  // CLOSE_REQ on every open tunnel, waits for the CLOSE_RSPs (10 s at most), then closes the
  // connections. Returns the tunnels closed cleanly.
  uint64_t close_all();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace konn::bench::fleet
