#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace konn::server {

// The last dial failures of one proxy-server, newest last, for the status page: a bounded ring
// (the oldest entry goes when a new one comes), so a flood of failures costs a fixed amount of
// memory. Thread-safe: one mutex, held only to copy an entry in or the ring out.
class DialFailureLog {
 public:
  struct Entry {
    std::chrono::system_clock::time_point at;
    std::string reason;       // dial_failure_count's reason, or "limit:<limit>" for a refusal
    std::string agent;        // agent id; empty when no agent was chosen
    std::string destination;  // the DIAL_REQ's address
    std::string error;        // what the agent or the server answered, if anything
  };

  explicit DialFailureLog(size_t capacity = 64) : capacity_(capacity) {}
  void record(Entry e);
  std::vector<Entry> recent() const;
  // Every failure recorded since start, including those the ring no longer holds.
  uint64_t total() const;
  size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<Entry> ring_;  // under mu_
  uint64_t total_ = 0;      // under mu_
};

}  // namespace konn::server
