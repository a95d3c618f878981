#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace konn::core::log {

// The last `capacity` events of one kind (dial failures, refused dials, failed sessions) kept
// for a status page, oldest first, and how many there were in all. A bounded ring: the oldest
// goes when a new one comes, so a flood of failures costs a fixed amount of memory. Thread-safe:
// one mutex, held only to move an event in or to copy the ring out; failures are rare enough
// that no data-path thread waits on it for long.
template <typename Event>
class RecentEvents {
 public:
  explicit RecentEvents(size_t capacity) : capacity_(capacity) {}

  void record(Event e) {
    std::lock_guard lock(mu_);
    ++total_;
    if (capacity_ == 0) return;
    if (ring_.size() == capacity_) ring_.pop_front();
    ring_.push_back(std::move(e));
  }

  // A copy of the events kept, oldest first.
  std::vector<Event> snapshot() const {
    std::lock_guard lock(mu_);
    return {ring_.begin(), ring_.end()};
  }

  // Every event recorded since start, including those the ring no longer holds.
  uint64_t total() const {
    std::lock_guard lock(mu_);
    return total_;
  }

  size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<Event> ring_;  // under mu_
  uint64_t total_ = 0;      // under mu_
};

}  // namespace konn::core::log
