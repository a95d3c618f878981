#include "proxy-server/backend/backend_registry.h"

#include <algorithm>
#include <string_view>

#include "proxy-server/backend/backend.h"

namespace konn::server {

BackendRegistry::BackendRegistry(std::vector<ProxyStrategy> strategies, AgentChoice choice)
    : strategies_(std::move(strategies)), pools_(choice) {}

// The stream of one agent id that takes new dials: the oldest that is not draining (else the
// oldest). Newer streams of an id are most often a duplicate the agent is about to close (an HA
// agent reaching a server it already holds through the balanced address), so, as upstream, the
// oldest one routes; a draining one gives way to the replacement that came after it. Reads the
// registry's own draining marks, which change only under mu_: a Backend's flag is set before
// it calls draining(), and a choice made from the flag in between would leave the pools holding
// a stream the registry no longer counts as routing.
Backend* BackendRegistry::routing_stream(const std::vector<Stream>& streams) {
  for (const auto& s : streams) {
    if (!s.draining) return s.backend.get();
  }
  return streams.empty() ? nullptr : streams.front().backend.get();
}

void BackendRegistry::reroute(const Backend* before, const std::vector<Stream>& streams) {
  Backend* after = routing_stream(streams);
  if (after == before) return;
  if (before != nullptr) pools_.erase(before);
  if (after != nullptr) pools_.insert(after);
}

void BackendRegistry::add(const std::shared_ptr<Backend>& backend) {
  std::lock_guard lock(mu_);
  auto& streams = agents_[backend->agent_id()];
  const Backend* before = routing_stream(streams);
  streams.push_back({backend, backend->draining()});
  reroute(before, streams);
}

void BackendRegistry::remove(const Backend* backend) {
  std::lock_guard lock(mu_);
  auto it = agents_.find(backend->agent_id());
  if (it == agents_.end()) return;
  auto& streams = it->second;
  const Backend* before = routing_stream(streams);
  streams.erase(std::remove_if(streams.begin(), streams.end(),
                               [backend](const Stream& s) { return s.backend.get() == backend; }),
                streams.end());
  if (before == backend) {
    pools_.erase(backend);
    before = nullptr;
  }
  reroute(before, streams);
  if (streams.empty()) agents_.erase(it);
}

void BackendRegistry::draining(const Backend* backend) {
  std::lock_guard lock(mu_);
  auto it = agents_.find(backend->agent_id());
  if (it == agents_.end()) return;
  auto& streams = it->second;
  auto self = std::find_if(streams.begin(), streams.end(),
                           [backend](const Stream& s) { return s.backend.get() == backend; });
  if (self == streams.end() || self->draining) return;
  Backend* before = routing_stream(streams);
  self->draining = true;
  if (before != backend) return;  // it was not taking new dials: nothing moves
  Backend* after = routing_stream(streams);
  if (after == backend) {
    pools_.mark_draining(after);  // every stream of the id drains: it stays, as a fallback
  } else {
    pools_.erase(backend);
    pools_.insert(after);
  }
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
  return pools_.count(strategy);
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
  for (const auto& [id, streams] : agents_) {
    for (const auto& st : streams) out.push_back(st.backend);
  }
  return out;
}

}  // namespace konn::server
