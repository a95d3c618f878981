#include "proxy-server/tunnel/pending_dial_table.h"

namespace konn::server {

PendingDialTable::AddResult PendingDialTable::add(int64_t random, std::weak_ptr<Frontend> frontend,
                                                  const Backend* backend, size_t max_total,
                                                  size_t max_per_backend,
                                                  std::shared_ptr<std::atomic<size_t>> count) {
  std::lock_guard lock(mu_);
  if (entries_.count(random) != 0) return AddResult::Duplicate;
  if (max_total > 0 && entries_.size() >= max_total) return AddResult::TooMany;
  size_t& mine = per_backend_[backend];
  if (max_per_backend > 0 && mine >= max_per_backend) return AddResult::TooManyForAgent;
  if (count) count->fetch_add(1, std::memory_order_relaxed);
  entries_.emplace(random, Entry{std::move(frontend), backend, std::move(count)});
  ++mine;
  update_gauge_locked();
  return AddResult::Added;
}

std::optional<PendingDialTable::Entry> PendingDialTable::take(int64_t random) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(random);
  if (it == entries_.end()) return std::nullopt;
  Entry e = std::move(it->second);
  entries_.erase(it);
  forget_locked(e);
  update_gauge_locked();
  return e;
}

std::vector<std::weak_ptr<Frontend>> PendingDialTable::take_all(const Backend* backend) {
  std::vector<std::weak_ptr<Frontend>> out;
  std::lock_guard lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.backend == backend) {
      forget_locked(it->second);
      out.push_back(std::move(it->second.frontend));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  update_gauge_locked();
  return out;
}

size_t PendingDialTable::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

size_t PendingDialTable::size_of(const Backend* backend) const {
  std::lock_guard lock(mu_);
  auto it = per_backend_.find(backend);
  return it == per_backend_.end() ? 0 : it->second;
}

}  // namespace konn::server
