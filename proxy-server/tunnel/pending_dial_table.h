#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include <prometheus/gauge.h>

namespace konn::server {

class Backend;
class Frontend;

// Dials sent to an agent and not yet answered, keyed by the dial id ("random") across all
// frontends, as upstream keys them. Thread-safe: one mutex, held only for map operations.
class PendingDialTable {
 public:
  struct Entry {
    std::weak_ptr<Frontend> frontend;
    const Backend* backend = nullptr;  // identity only, never dereferenced
  };

  // False when `random` is already pending (the caller answers the dial with an error).
  bool add(int64_t random, std::weak_ptr<Frontend> frontend, const Backend* backend);
  // Removes and returns the entry, if any.
  std::optional<Entry> take(int64_t random);
  // Removes and returns every entry routed to `backend` (its stream ended).
  std::vector<std::weak_ptr<Frontend>> take_all(const Backend* backend);
  size_t size() const;
  // Keeps `gauge` equal to size() (pending_backend_dials).
  void set_gauge(prometheus::Gauge* gauge) { gauge_ = gauge; }

 private:
  void update_gauge_locked() {
    if (gauge_ != nullptr) gauge_->Set(static_cast<double>(entries_.size()));
  }
  prometheus::Gauge* gauge_ = nullptr;
  mutable std::mutex mu_;
  std::unordered_map<int64_t, Entry> entries_;
};

}  // namespace konn::server
