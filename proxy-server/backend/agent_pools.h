#pragma once

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tunnel/agent_identifiers.h"
#include "proxy-server/backend/proxy_strategy.h"

namespace konn::server {

// Agents kept in one place, in the order they arrived, with O(1) insertion, removal and access
// by index (a removal moves the last one into the gap).
template <typename Agent>
class IndexedAgents {
 public:
  bool contains(const Agent* a) const { return pos_.count(a) != 0; }
  void insert(Agent* a) {
    if (pos_.emplace(a, items_.size()).second) items_.push_back(a);
  }
  bool erase(const Agent* a) {
    auto it = pos_.find(a);
    if (it == pos_.end()) return false;
    const size_t at = it->second;
    pos_.erase(it);
    if (at + 1 != items_.size()) {
      items_[at] = items_.back();
      pos_[items_[at]] = at;
    }
    items_.pop_back();
    return true;
  }
  const std::vector<Agent*>& items() const { return items_; }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }

 private:
  std::vector<Agent*> items_;
  std::unordered_map<const Agent*, size_t> pos_;
};

// The agents one strategy may route to, split into those taking new dials and those draining
// (chosen only when no other matches).
template <typename Agent>
struct AgentPool {
  IndexedAgents<Agent> ready;
  IndexedAgents<Agent> draining;

  bool empty() const { return ready.empty() && draining.empty(); }
  void insert(Agent* a) { (a->draining() ? draining : ready).insert(a); }
  void erase(const Agent* a) {
    if (!ready.erase(a)) draining.erase(a);
  }
  void mark_draining(Agent* a) {
    if (ready.erase(a)) draining.insert(a);
  }
};

// The candidate sets of the proxy strategies, kept up to date as agents come, go and drain, so
// that a dial's choice never walks the agents: `default` is every agent, `defaultRoute` those
// that announced it, `destHost` one set per host/ipv4/ipv6 identifier value (several agents may
// share one). Agents with `cidr=` identifiers (a konn extension) are the one exception: a
// destHost dial checks each of them (O(agents with cidr identifiers)).
//
// `Agent` provides `const core::tunnel::AgentIdentifiers& identifiers() const` (fixed while the
// agent is in the pools), `bool draining() const` and `uint64_t load() const` (any thread, read
// without a lock). Not thread-safe: the owner (BackendRegistry) holds its lock around every call.
template <typename Agent>
class AgentPools {
 public:
  explicit AgentPools(AgentChoice choice = AgentChoice::LeastLoaded) : choice_(choice) {}

  // `a` takes new dials from now on; its identifiers and draining state are read now.
  void insert(Agent* a) {
    const auto& ids = a->identifiers();
    all_.insert(a);
    if (ids.default_route) default_route_.insert(a);
    for (const auto& key : exact_keys(ids)) by_host_[key].insert(a);
    if (!ids.cidrs.empty()) {
      with_cidrs_.insert(a);
      for (const auto& c : cidr_keys(ids)) ++cidr_keys_[c];
    }
  }

  void erase(const Agent* a) {
    const auto& ids = a->identifiers();
    all_.erase(a);
    default_route_.erase(a);
    for (const auto& key : exact_keys(ids)) {
      auto it = by_host_.find(key);
      if (it == by_host_.end()) continue;
      it->second.erase(a);
      if (it->second.empty()) by_host_.erase(it);
    }
    if (with_cidrs_.erase(a)) {
      for (const auto& c : cidr_keys(ids)) {
        auto it = cidr_keys_.find(c);
        if (it != cidr_keys_.end() && --it->second == 0) cidr_keys_.erase(it);
      }
    }
  }

  // `a` announced DRAIN (its draining() is already true): it is chosen only as a fallback now.
  void mark_draining(Agent* a) {
    all_.mark_draining(a);
    default_route_.mark_draining(a);
    for (const auto& key : exact_keys(a->identifiers())) {
      auto it = by_host_.find(key);
      if (it != by_host_.end()) it->second.mark_draining(a);
    }
  }

  // The agent for a dial to `dest_host` (no port, no brackets): the strategies are tried in
  // order and the first with a candidate wins; within it, a non-draining candidate if any.
  // nullptr: none ("No agent available").
  Agent* pick(const std::vector<ProxyStrategy>& strategies, std::string_view dest_host,
              std::mt19937_64& rng) const {
    for (auto strategy : strategies) {
      Agent* a = nullptr;
      switch (strategy) {
        case ProxyStrategy::Default:
          a = choose_in(all_, rng);
          break;
        case ProxyStrategy::DefaultRoute:
          a = choose_in(default_route_, rng);
          break;
        case ProxyStrategy::DestHost:
          a = pick_dest_host(dest_host, rng);
          break;
      }
      if (a != nullptr) return a;
    }
    return nullptr;
  }

  // A non-draining agent, as the default strategy would choose it now (for placement guesses).
  Agent* pick_ready(std::mt19937_64& rng) const { return choose(all_.ready.items(), rng); }

  AgentChoice choice() const { return choice_; }
  size_t size() const { return all_.ready.size() + all_.draining.size(); }

  // How many candidates `strategy` has, as upstream's ready_backends counts them: the agents for
  // default, those with default-route for defaultRoute, and for destHost the distinct identifier
  // values (host, ipv4, ipv6 and cidr text; the same text under two types counts once). Kept as
  // the agents come and go, so a gauge update on every connect costs O(agents with cidr
  // identifiers), not O(agents): a walk over all of them made a reconnect storm quadratic.
  size_t count(ProxyStrategy strategy) const {
    switch (strategy) {
      case ProxyStrategy::Default:
        return size();
      case ProxyStrategy::DefaultRoute:
        return default_route_.ready.size() + default_route_.draining.size();
      case ProxyStrategy::DestHost:
        break;
    }
    size_t n = by_host_.size();
    for (const auto& [cidr, agents] : cidr_keys_) n += by_host_.count(cidr) == 0 ? 1 : 0;
    return n;
  }

 private:
  // Appends to `out` those of `values` it does not hold yet (an agent may repeat a value).
  static void add_distinct(std::vector<std::string>& out, const std::vector<std::string>& values) {
    for (const auto& v : values) {
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
  }

  // The distinct host/ipv4/ipv6 values.
  static std::vector<std::string> exact_keys(const core::tunnel::AgentIdentifiers& ids) {
    std::vector<std::string> keys;
    for (const auto* list : {&ids.hosts, &ids.ipv4, &ids.ipv6}) add_distinct(keys, *list);
    return keys;
  }

  // The distinct cidr values.
  static std::vector<std::string> cidr_keys(const core::tunnel::AgentIdentifiers& ids) {
    std::vector<std::string> keys;
    add_distinct(keys, ids.cidrs);
    return keys;
  }

  Agent* choose(const std::vector<Agent*>& from, std::mt19937_64& rng) const {
    auto i = choose_index(from.size(), choice_, rng, [&from](size_t k) { return from[k]->load(); });
    return i ? from[*i] : nullptr;
  }

  Agent* choose_in(const AgentPool<Agent>& pool, std::mt19937_64& rng) const {
    if (!pool.ready.empty()) return choose(pool.ready.items(), rng);
    return choose(pool.draining.items(), rng);
  }

  Agent* pick_dest_host(std::string_view dest_host, std::mt19937_64& rng) const {
    auto it = by_host_.find(std::string(dest_host));
    if (with_cidrs_.empty()) return it == by_host_.end() ? nullptr : choose_in(it->second, rng);
    // Agents whose cidr contains the destination join those that named it exactly.
    std::vector<Agent*> ready;
    std::vector<Agent*> draining;
    if (it != by_host_.end()) {
      ready = it->second.ready.items();
      draining = it->second.draining.items();
    }
    for (Agent* a : with_cidrs_.items()) {
      if (it != by_host_.end() && (it->second.ready.contains(a) || it->second.draining.contains(a)))
        continue;
      if (a->identifiers().serves_host(dest_host)) (a->draining() ? draining : ready).push_back(a);
    }
    return choose(ready.empty() ? draining : ready, rng);
  }

  AgentChoice choice_;
  AgentPool<Agent> all_;
  AgentPool<Agent> default_route_;
  std::unordered_map<std::string, AgentPool<Agent>> by_host_;
  IndexedAgents<Agent> with_cidrs_;
  std::unordered_map<std::string, size_t> cidr_keys_;  // cidr text -> agents announcing it
};

}  // namespace konn::server
