#pragma once

#include <chrono>
#include <random>

namespace konn::agent {

// Exponential backoff of the connect loop, as upstream's agent does it: the first delay is
// `initial`, each failure multiplies it by `factor` up to `cap`, and every returned delay gets up
// to `jitter` of itself added at random (so a delay lies in [d, d * (1 + jitter)]). A success
// resets it. Not thread-safe: owned by the connect loop.
class Backoff {
 public:
  using Duration = std::chrono::nanoseconds;

  Backoff(Duration initial, Duration cap, double factor = 1.5, double jitter = 0.1);

  // The delay to wait after the next failure.
  Duration next();
  // After a success: the next failure waits `initial` again.
  void reset();
  // `d` plus up to jitter * d, the jitter used for every wait of the loop.
  Duration jittered(Duration d);

 private:
  Duration initial_;
  Duration cap_;
  double factor_;
  double jitter_;
  Duration current_{0};  // 0: no failure since the last reset
  std::mt19937_64 rng_;
};

}  // namespace konn::agent
