#include "proxy-server/backend/backend_registry.h"

#include <algorithm>

#include "proxy-server/backend/backend.h"

namespace konn::server {

BackendRegistry::BackendRegistry(std::vector<ProxyStrategy> strategies)
    : strategies_(std::move(strategies)) {}

void BackendRegistry::add(const std::shared_ptr<Backend>& backend) {
  std::lock_guard lock(mu_);
  agents_[backend->agent_id()].push_back(backend);
}

void BackendRegistry::remove(const Backend* backend) {
  std::lock_guard lock(mu_);
  auto it = agents_.find(backend->agent_id());
  if (it == agents_.end()) return;
  auto& streams = it->second;
  streams.erase(std::remove_if(streams.begin(), streams.end(),
                               [backend](const auto& b) { return b.get() == backend; }),
                streams.end());
  if (streams.empty()) agents_.erase(it);
}

std::shared_ptr<Backend> BackendRegistry::pick(std::string_view dest_host) {
  std::lock_guard lock(mu_);
  std::vector<Candidate> candidates;
  std::vector<Backend*> backends;
  candidates.reserve(agents_.size());
  backends.reserve(agents_.size());
  for (auto& [id, streams] : agents_) {
    Backend* newest = streams.back().get();
    candidates.push_back(Candidate{&newest->identifiers(), newest->draining()});
    backends.push_back(newest);
  }
  auto chosen = select_backend(candidates, strategies_, dest_host, rng_);
  if (!chosen) return nullptr;
  return agents_[backends[*chosen]->agent_id()].back();
}

std::optional<size_t> BackendRegistry::likely_home() {
  std::lock_guard lock(mu_);
  std::vector<const Backend*> usable;
  usable.reserve(agents_.size());
  for (const auto& [id, streams] : agents_) {
    if (!streams.back()->draining()) usable.push_back(streams.back().get());
  }
  if (usable.empty()) return std::nullopt;
  std::uniform_int_distribution<size_t> any(0, usable.size() - 1);
  return usable[any(rng_)]->home_index();
}

bool BackendRegistry::ready() const {
  // Ready when the first strategy can route anywhere (for destHost: any agent announced an
  // address at all), as upstream decides readiness.
  return !strategies_.empty() && usable_by(strategies_.front()) > 0;
}

size_t BackendRegistry::usable_by(ProxyStrategy strategy) const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [id, streams] : agents_) {
    const auto& ids = streams.back()->identifiers();
    switch (strategy) {
      case ProxyStrategy::Default:
        ++n;
        break;
      case ProxyStrategy::DestHost:
        if (!ids.hosts.empty() || !ids.ipv4.empty() || !ids.ipv6.empty() || !ids.cidrs.empty()) ++n;
        break;
      case ProxyStrategy::DefaultRoute:
        if (ids.default_route) ++n;
        break;
    }
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

}  // namespace konn::server
