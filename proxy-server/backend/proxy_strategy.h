#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace konn::server {

// Backend selection strategies, evaluated in the order given by --proxy-strategies; the first
// that finds a backend wins, and when none does the dial fails with "No agent available".
enum class ProxyStrategy {
  Default,       // any agent, preferring non-draining ones
  DestHost,      // an agent whose host/ipv4/ipv6 identifier equals the destination host, or
                 // (beyond upstream) whose cidr identifier contains it
  DefaultRoute,  // an agent that announced default-route=true
};

std::optional<ProxyStrategy> parse_proxy_strategy(std::string_view name);
std::string to_string(ProxyStrategy s);

// How one agent is chosen among a strategy's candidates (--agent-choice, konn).
enum class AgentChoice {
  LeastLoaded,  // two candidates at random, the one with less work (power of two choices)
  Random,       // one candidate at random (upstream)
};

std::optional<AgentChoice> parse_agent_choice(std::string_view name);
std::string to_string(AgentChoice c);

// What one unit of an agent's load stands for in queued bytes: a full socket read of a client
// (64 KiB) weighs as much as one open tunnel or one pending dial.
constexpr size_t kQueuedBytesPerLoadUnit = 64 * 1024;

// The work an agent stream carries now, as --agent-choice=least-loaded weighs it: its open
// tunnels, plus its dials awaiting DIAL_RSP, plus the DATA waiting to be written to it in units
// of kQueuedBytesPerLoadUnit. A slow agent (slow link, slow destinations) holds its tunnels and
// dials longer and its queue grows, so it weighs more while it is slow.
inline uint64_t agent_load(size_t tunnels, size_t pending_dials, size_t queued_bytes) {
  return static_cast<uint64_t>(tunnels) + pending_dials + queued_bytes / kQueuedBytesPerLoadUnit;
}

// Index of the one of `n` candidates to use (nullopt when n is 0). Random: uniform. LeastLoaded:
// two distinct candidates at random, the one whose load(i) is lower (the first drawn on a tie,
// itself a random one). O(1): two draws and two reads of the load, whatever n.
template <typename LoadOf>
std::optional<size_t> choose_index(size_t n, AgentChoice choice, std::mt19937_64& rng,
                                   const LoadOf& load) {
  if (n == 0) return std::nullopt;
  if (n == 1) return size_t{0};
  std::uniform_int_distribution<size_t> first(0, n - 1);
  const size_t i = first(rng);
  if (choice == AgentChoice::Random) return i;
  std::uniform_int_distribution<size_t> second(0, n - 2);
  size_t j = second(rng);
  if (j >= i) ++j;  // distinct from i, uniform over the others
  return load(j) < load(i) ? j : i;
}

}  // namespace konn::server
