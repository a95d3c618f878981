#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "proxy-server/backend/agent_pools.h"
#include "proxy-server/backend/proxy_strategy.h"

namespace konn::server {

class Backend;

// The connected agents. Several streams may carry the same agent id (an HA agent's duplicate
// connection to a server it already holds, which it closes at once; a reconnect racing the old
// stream's end; a misconfigured fleet); the oldest one that is not draining takes new dials, as
// upstream's oldest does, and the others keep serving the tunnels they already carry. Each
// strategy's candidates (one routing stream per agent id) are kept in AgentPools, so a dial's
// choice is O(1) in the number of agents (--agent-choice: the less loaded of two, or one at
// random). Thread-safe: one mutex, held for map operations and selection only; an agent's load is
// read without it (Backend::load).
class BackendRegistry {
 public:
  explicit BackendRegistry(std::vector<ProxyStrategy> strategies,
                           AgentChoice choice = AgentChoice::LeastLoaded);

  void add(const std::shared_ptr<Backend>& backend);
  void remove(const Backend* backend);
  // `backend` announced DRAIN (its draining() is true already): chosen only as a fallback.
  void draining(const Backend* backend);
  // Picks a backend for a dial to `dest_host` (no port). nullptr: "No agent available".
  std::shared_ptr<Backend> pick(std::string_view dest_host);
  // The worker (WorkerPool index) of the agent stream a dial would most likely go to now: the
  // routing stream of a non-draining agent, chosen as a default-strategy dial would be. nullopt:
  // no agent.
  std::optional<size_t> likely_home();
  // Ready when the first strategy could route somewhere (upstream's readiness rule).
  bool ready() const;
  size_t agent_count() const;
  // ready_backends{proxy_strategy}, as upstream counts it: the agents for default, the agents
  // with default-route for defaultRoute, and for destHost the distinct identifiers (host, ipv4,
  // ipv6 and konn's cidr) the agents announced. Zero means the strategy cannot route at all.
  size_t usable_by(ProxyStrategy strategy) const;
  // How many streams share `agent_id` (for the duplicate-id warning).
  size_t streams_of(const std::string& agent_id) const;
  // Every stream, unordered (the status page); the lock is held only to copy the pointers.
  std::vector<std::shared_ptr<Backend>> all() const;

 private:
  std::vector<ProxyStrategy> strategies_;
  mutable std::mutex mu_;
  struct Stream {
    std::shared_ptr<Backend> backend;
    bool draining;  // since draining(backend): the registry's view, changed only under mu_
  };
  // agent id -> its streams, oldest first.
  std::unordered_map<std::string, std::vector<Stream>> agents_;
  AgentPools<Backend> pools_;  // exactly the routing stream of each agent id
  // The stream of an id that takes new dials (nullptr: none). Under mu_.
  static Backend* routing_stream(const std::vector<Stream>& streams);
  // Moves the id's place in the pools from `before` (its routing stream until now, or nullptr)
  // to the one `streams` now choose. Under mu_.
  void reroute(const Backend* before, const std::vector<Stream>& streams);
  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace konn::server
