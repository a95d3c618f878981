#include "proxy-server/tunnel/connection_table.h"

namespace konn::server {

void ConnectionTable::add(int64_t connect_id, std::shared_ptr<Frontend> frontend) {
  std::lock_guard lock(mu_);
  conns_[connect_id] = std::move(frontend);
  size_.store(conns_.size(), std::memory_order_relaxed);
}

std::shared_ptr<Frontend> ConnectionTable::find(int64_t connect_id) const {
  std::lock_guard lock(mu_);
  auto it = conns_.find(connect_id);
  return it == conns_.end() ? nullptr : it->second;
}

std::shared_ptr<Frontend> ConnectionTable::take(int64_t connect_id) {
  std::lock_guard lock(mu_);
  auto it = conns_.find(connect_id);
  if (it == conns_.end()) return nullptr;
  auto f = std::move(it->second);
  conns_.erase(it);
  size_.store(conns_.size(), std::memory_order_relaxed);
  return f;
}

std::vector<std::shared_ptr<Frontend>> ConnectionTable::take_all() {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Frontend>> out;
  out.reserve(conns_.size());
  for (auto& [id, f] : conns_) out.push_back(std::move(f));
  conns_.clear();
  size_.store(0, std::memory_order_relaxed);
  return out;
}

std::vector<std::shared_ptr<Frontend>> ConnectionTable::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Frontend>> out;
  out.reserve(conns_.size());
  for (const auto& [id, f] : conns_) out.push_back(f);
  return out;
}

std::vector<std::pair<int64_t, std::shared_ptr<Frontend>>> ConnectionTable::entries() const {
  std::lock_guard lock(mu_);
  return {conns_.begin(), conns_.end()};
}

size_t ConnectionTable::size() const { return size_.load(std::memory_order_relaxed); }

}  // namespace konn::server
