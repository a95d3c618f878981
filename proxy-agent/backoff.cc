#include "proxy-agent/backoff.h"

#include <algorithm>

namespace konn::agent {

Backoff::Backoff(Duration initial, Duration cap, double factor, double jitter)
    : initial_(initial), cap_(std::max(cap, initial)), factor_(factor), jitter_(jitter),
      rng_(std::random_device{}()) {}

Backoff::Duration Backoff::next() {
  if (current_.count() == 0) {
    current_ = initial_;
  } else {
    auto grown = std::chrono::duration<double, std::nano>(current_) * factor_;
    current_ = grown >= std::chrono::duration<double, std::nano>(cap_)
                   ? cap_
                   : std::chrono::duration_cast<Duration>(grown);
  }
  return jittered(current_);
}

void Backoff::reset() { current_ = Duration{0}; }

Backoff::Duration Backoff::jittered(Duration d) {
  if (jitter_ <= 0) return d;
  std::uniform_real_distribution<double> dist(0.0, jitter_);
  return d + std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::nano>(d) *
                                                   dist(rng_));
}

}  // namespace konn::agent
