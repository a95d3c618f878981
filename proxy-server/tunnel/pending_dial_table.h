#pragma once

#include <atomic>
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
    // The backend's count of pending dials (Backend::pending_dials), kept while the entry is;
    // shared, since the backend may be gone before the entry is taken.
    std::shared_ptr<std::atomic<size_t>> count;
  };

  enum class AddResult {
    Added,
    Duplicate,        // `random` is already pending
    TooMany,          // `max_total` dials are pending
    TooManyForAgent,  // `max_per_backend` dials are pending on `backend`
  };
  // Records the dial unless `random` is pending already or a limit (0: none) is reached; the
  // caller answers a refused dial with an error. `count` (may be null) is incremented while the
  // entry exists (relaxed, under the table's lock), so that it can be read without the lock.
  AddResult add(int64_t random, std::weak_ptr<Frontend> frontend, const Backend* backend,
                size_t max_total = 0, size_t max_per_backend = 0,
                std::shared_ptr<std::atomic<size_t>> count = nullptr);
  // Removes and returns the entry, if any.
  std::optional<Entry> take(int64_t random);
  // Removes and returns every entry routed to `backend` (its stream ended).
  std::vector<std::weak_ptr<Frontend>> take_all(const Backend* backend);
  size_t size() const;
  // Pending dials routed to `backend`.
  size_t size_of(const Backend* backend) const;
  // Keeps `gauge` equal to size() (pending_backend_dials).
  void set_gauge(prometheus::Gauge* gauge) { gauge_ = gauge; }

 private:
  void forget_locked(const Entry& e) {
    if (e.count) e.count->fetch_sub(1, std::memory_order_relaxed);
    forget_locked(e.backend);
  }
  void forget_locked(const Backend* backend) {
    auto it = per_backend_.find(backend);
    if (it != per_backend_.end() && --it->second == 0) per_backend_.erase(it);
  }
  void update_gauge_locked() {
    if (gauge_ != nullptr) gauge_->Set(static_cast<double>(entries_.size()));
  }
  prometheus::Gauge* gauge_ = nullptr;
  mutable std::mutex mu_;
  std::unordered_map<int64_t, Entry> entries_;
  std::unordered_map<const Backend*, size_t> per_backend_;  // entries_ counted by backend
};

}  // namespace konn::server
