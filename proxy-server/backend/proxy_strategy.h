#pragma once

#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/tunnel/agent_identifiers.h"

namespace konn::server {

// Backend selection strategies, evaluated in the order given by --proxy-strategies; the first
// that finds a backend wins, and when none does the dial fails with "No agent available".
enum class ProxyStrategy {
  Default,       // any agent, at random, preferring non-draining ones
  DestHost,      // an agent whose host/ipv4/ipv6 identifier equals the destination host, or
                 // (beyond upstream) whose cidr identifier contains it
  DefaultRoute,  // an agent that announced default-route=true
};

std::optional<ProxyStrategy> parse_proxy_strategy(std::string_view name);
std::string to_string(ProxyStrategy s);

// What selection needs to know about one connected agent.
struct Candidate {
  const core::tunnel::AgentIdentifiers* identifiers = nullptr;
  bool draining = false;
};

// Returns the index of the chosen candidate, or nullopt. `dest_host` is the destination without
// port or brackets. Within a strategy, non-draining candidates are preferred; a draining one is
// chosen only when every match drains.
std::optional<size_t> select_backend(const std::vector<Candidate>& candidates,
                                     const std::vector<ProxyStrategy>& strategies,
                                     std::string_view dest_host, std::mt19937_64& rng);

}  // namespace konn::server
