#include "proxy-server/status/dial_failure_log.h"

namespace konn::server {

void DialFailureLog::record(Entry e) {
  std::lock_guard lock(mu_);
  ++total_;
  if (capacity_ == 0) return;
  if (ring_.size() == capacity_) ring_.pop_front();
  ring_.push_back(std::move(e));
}

std::vector<DialFailureLog::Entry> DialFailureLog::recent() const {
  std::lock_guard lock(mu_);
  return {ring_.begin(), ring_.end()};
}

uint64_t DialFailureLog::total() const {
  std::lock_guard lock(mu_);
  return total_;
}

}  // namespace konn::server
