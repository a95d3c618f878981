#include "core/endpoint/connection_table.h"

namespace konn::core::endpoint {

int64_t ConnectionTable::allocate_connect_id() {
  std::lock_guard lock(mu_);
  return ++next_id_;
}

bool ConnectionTable::add_dial(int64_t dial_id, Ptr conn) {
  std::lock_guard lock(mu_);
  if (closed_) return false;
  return by_dial_.emplace(dial_id, std::move(conn)).second;
}

bool ConnectionTable::establish(int64_t dial_id, int64_t connect_id,
                                const EndpointConnection* conn) {
  std::lock_guard lock(mu_);
  auto it = by_dial_.find(dial_id);
  if (closed_ || it == by_dial_.end() || it->second.get() != conn) return false;
  by_connect_[connect_id] = it->second;
  return true;
}

ConnectionTable::Ptr ConnectionTable::find(int64_t connect_id) const {
  std::lock_guard lock(mu_);
  auto it = by_connect_.find(connect_id);
  return it == by_connect_.end() ? nullptr : it->second;
}

ConnectionTable::Ptr ConnectionTable::find_dial(int64_t dial_id) const {
  std::lock_guard lock(mu_);
  auto it = by_dial_.find(dial_id);
  return it == by_dial_.end() ? nullptr : it->second;
}

void ConnectionTable::remove(int64_t dial_id, int64_t connect_id, const EndpointConnection* conn) {
  Ptr dropped_dial;
  Ptr dropped_connect;  // released after the lock: a last reference may run a destructor
  std::lock_guard lock(mu_);
  if (auto it = by_dial_.find(dial_id); it != by_dial_.end() && it->second.get() == conn) {
    dropped_dial = std::move(it->second);
    by_dial_.erase(it);
  }
  if (auto it = by_connect_.find(connect_id); it != by_connect_.end() && it->second.get() == conn) {
    dropped_connect = std::move(it->second);
    by_connect_.erase(it);
  }
}

std::vector<ConnectionTable::Ptr> ConnectionTable::take_all() {
  std::lock_guard lock(mu_);
  closed_ = true;
  std::vector<Ptr> out;
  out.reserve(by_dial_.size());
  for (auto& [id, conn] : by_dial_) out.push_back(std::move(conn));
  by_dial_.clear();
  by_connect_.clear();
  return out;
}

size_t ConnectionTable::size() const {
  std::lock_guard lock(mu_);
  return by_dial_.size();
}

std::vector<ConnectionTable::Ptr> ConnectionTable::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<Ptr> out;
  out.reserve(by_dial_.size());
  for (const auto& [id, conn] : by_dial_) out.push_back(conn);
  return out;
}

}  // namespace konn::core::endpoint
