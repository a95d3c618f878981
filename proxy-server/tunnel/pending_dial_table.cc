#include "proxy-server/tunnel/pending_dial_table.h"

namespace konn::server {

bool PendingDialTable::add(int64_t random, std::weak_ptr<Frontend> frontend,
                           const Backend* backend) {
  std::lock_guard lock(mu_);
  bool added = entries_.try_emplace(random, Entry{std::move(frontend), backend}).second;
  update_gauge_locked();
  return added;
}

std::optional<PendingDialTable::Entry> PendingDialTable::take(int64_t random) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(random);
  if (it == entries_.end()) return std::nullopt;
  Entry e = std::move(it->second);
  entries_.erase(it);
  update_gauge_locked();
  return e;
}

std::vector<std::weak_ptr<Frontend>> PendingDialTable::take_all(const Backend* backend) {
  std::vector<std::weak_ptr<Frontend>> out;
  std::lock_guard lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.backend == backend) {
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

}  // namespace konn::server
