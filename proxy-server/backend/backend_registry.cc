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

bool BackendRegistry::ready() const {
  std::lock_guard lock(mu_);
  if (strategies_.empty()) return false;
  std::vector<Candidate> candidates;
  for (const auto& [id, streams] : agents_) {
    candidates.push_back(Candidate{&streams.back()->identifiers(), false});
  }
  // Readiness asks whether the first strategy can route anywhere: for destHost, whether any
  // agent announced an address at all.
  switch (strategies_.front()) {
    case ProxyStrategy::Default:
      return !candidates.empty();
    case ProxyStrategy::DestHost:
      return std::any_of(candidates.begin(), candidates.end(), [](const Candidate& c) {
        return !c.identifiers->hosts.empty() || !c.identifiers->ipv4.empty() ||
               !c.identifiers->ipv6.empty() || !c.identifiers->cidrs.empty();
      });
    case ProxyStrategy::DefaultRoute:
      return std::any_of(candidates.begin(), candidates.end(),
                         [](const Candidate& c) { return c.identifiers->default_route; });
  }
  return false;
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
