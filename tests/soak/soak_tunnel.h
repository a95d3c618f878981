#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <string>

#include "bench/loadgen/stream.h"

namespace konn::soak {

using Clock = std::chrono::steady_clock;

// What one tunnel of the soak run does (drawn from the run's seeded RNG, so --seed= replays it).
enum class Kind {
  Echo,        // 'X': n random bytes up, echoed back; SHA-256 compared on both ends
  Download,    // 'S': n seeded bytes down, compared and hashed against the same seed's bytes
  SlowReader,  // a download read in small pieces with pauses, so backpressure engages
  Reset,       // a download or an echo ended abruptly mid-transfer (RST / cancelled call)
};
enum class Path { Grpc, Connect };

const char* to_string(Kind k);
const char* to_string(Path p);

struct TunnelPlan {
  int index = 0;
  Kind kind = Kind::Echo;
  Path path = Path::Grpc;
  uint64_t seed = 0;   // the bytes' seed
  uint64_t bytes = 0;  // what the destination is asked to send (download) or receive (echo)
  // Reset: after how many received bytes the client resets, and whether it resets an echo.
  uint64_t reset_after = 0;
  bool reset_echo = false;
  // SlowReader: bytes per read and pause after each read.
  size_t slow_read = 0;
  std::chrono::microseconds slow_pause{0};

  // Draws the next tunnel.
  static TunnelPlan draw(int index, std::mt19937_64& rng);
};

enum class Outcome {
  Verified,  // every byte arrived and both hashes match
  Reset,     // reset as planned; the bytes before the reset matched
  Failed,    // did not complete (refused dial, early EOF, error): a fault's doing, or a violation
  Corrupt,   // a wrong byte or a hash mismatch: always a violation
  Stuck,     // no progress within the tunnel timeout: always a violation
};
const char* to_string(Outcome o);

struct TunnelResult {
  Outcome outcome = Outcome::Failed;
  std::string error;            // why, for Failed, Corrupt and Stuck
  uint64_t bytes_verified = 0;  // bytes compared with what the other end sent (both directions)
  Clock::time_point start, end;
};

// Runs one tunnel through `opener` to the soak destination at `target`, checking every byte.
// Never throws; a timeout of `limit` makes the result Stuck. g++ 12: build the awaitable in its
// own statement, then co_await it (its by-value arguments are temporaries of that statement).
core::io::Awaitable<TunnelResult> run_tunnel(bench::Opener& opener, std::string target,
                                             TunnelPlan plan, std::chrono::milliseconds limit);

}  // namespace konn::soak
