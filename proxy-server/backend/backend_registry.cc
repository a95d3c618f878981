#include "proxy-server/backend/backend_registry.h"

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "proxy-server/backend/backend.h"

namespace konn::server {

BackendRegistry::BackendRegistry(std::vector<ProxyStrategy> strategies, AgentChoice choice)
    : strategies_(std::move(strategies)), pools_(choice) {}

void BackendRegistry::add(const std::shared_ptr<Backend>& backend) {
  std::lock_guard lock(mu_);
  auto& streams = agents_[backend->agent_id()];
  // The newest stream takes new dials: it replaces the previous newest in the pools.
  if (!streams.empty()) pools_.erase(streams.back().get());
  streams.push_back(backend);
  pools_.insert(backend.get());
}

void BackendRegistry::remove(const Backend* backend) {
  std::lock_guard lock(mu_);
  auto it = agents_.find(backend->agent_id());
  if (it == agents_.end()) return;
  auto& streams = it->second;
  const bool was_newest = !streams.empty() && streams.back().get() == backend;
  streams.erase(std::remove_if(streams.begin(), streams.end(),
                               [backend](const auto& b) { return b.get() == backend; }),
                streams.end());
  if (was_newest) {
    pools_.erase(backend);
    // The stream before it takes new dials again.
    if (!streams.empty()) pools_.insert(streams.back().get());
  }
  if (streams.empty()) agents_.erase(it);
}

void BackendRegistry::draining(const Backend* backend) {
  std::lock_guard lock(mu_);
  auto it = agents_.find(backend->agent_id());
  if (it == agents_.end() || it->second.back().get() != backend) return;
  pools_.mark_draining(it->second.back().get());
}

std::shared_ptr<Backend> BackendRegistry::pick(std::string_view dest_host) {
  std::lock_guard lock(mu_);
  Backend* chosen = pools_.pick(strategies_, dest_host, rng_);
  if (chosen == nullptr) return nullptr;
  // Alive: agents_ holds it. The stream's own reference is the one to hand out.
  return std::static_pointer_cast<Backend>(chosen->shared_from_this());
}

std::optional<size_t> BackendRegistry::likely_home() {
  std::lock_guard lock(mu_);
  const Backend* chosen = pools_.pick_ready(rng_);
  if (chosen == nullptr) return std::nullopt;
  return chosen->home_index();
}

bool BackendRegistry::ready() const {
  // Ready when the first strategy can route anywhere (for destHost: any agent announced an
  // address at all), as upstream decides readiness.
  return !strategies_.empty() && usable_by(strategies_.front()) > 0;
}

size_t BackendRegistry::usable_by(ProxyStrategy strategy) const {
  std::lock_guard lock(mu_);
  if (strategy == ProxyStrategy::DestHost) {
    // As upstream's DestHostBackendManager: one entry per distinct identifier (an address or
    // host any agent announced), not per agent. Upstream keys its three types in one map, so
    // the same text under two types counts once; so here.
    std::unordered_set<std::string_view> keys;
    for (const auto& [id, streams] : agents_) {
      const auto& ids = streams.back()->identifiers();
      for (const auto* list : {&ids.hosts, &ids.ipv4, &ids.ipv6, &ids.cidrs}) {
        keys.insert(list->begin(), list->end());
      }
    }
    return keys.size();
  }
  size_t n = 0;
  for (const auto& [id, streams] : agents_) {
    if (strategy == ProxyStrategy::Default || streams.back()->identifiers().default_route) ++n;
  }
  return n;
}

size_t BackendRegistry::agent_count() const {
  std::lock_guard lock(mu_);
  return agents_.size();
}

size_t BackendRegistry::streams_of(const std::string& agent_id) const {
  std::lock_guard lock(mu_);
  auto it = agents_.find(agent_id);
  return it == agents_.end() ? 0 : it->second.size();
}

std::vector<std::shared_ptr<Backend>> BackendRegistry::all() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Backend>> out;
  out.reserve(agents_.size());
  for (const auto& [id, streams] : agents_) out.insert(out.end(), streams.begin(), streams.end());
  return out;
}

}  // namespace konn::server
