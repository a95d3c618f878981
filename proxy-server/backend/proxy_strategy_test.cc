#include "proxy-server/backend/proxy_strategy.h"

#include <array>
#include <vector>

#include <catch2/catch.hpp>

using namespace konn::server;

TEST_CASE("strategy and agent-choice names", "[server][strategy]") {
  CHECK(parse_proxy_strategy("destHost") == ProxyStrategy::DestHost);
  CHECK_FALSE(parse_proxy_strategy("cidr"));
  CHECK(parse_agent_choice("least-loaded") == AgentChoice::LeastLoaded);
  CHECK(parse_agent_choice("random") == AgentChoice::Random);
  CHECK_FALSE(parse_agent_choice("leastLoaded"));
  CHECK(to_string(AgentChoice::LeastLoaded) == "least-loaded");
  CHECK(to_string(AgentChoice::Random) == "random");
}

TEST_CASE("an agent's load: tunnels, pending dials, queued bytes in 64 KiB units",
          "[server][strategy]") {
  CHECK(agent_load(0, 0, 0) == 0);
  CHECK(agent_load(3, 0, 0) == 3);
  CHECK(agent_load(0, 2, 0) == 2);
  CHECK(agent_load(0, 0, kQueuedBytesPerLoadUnit - 1) == 0);
  CHECK(agent_load(0, 0, 3 * kQueuedBytesPerLoadUnit) == 3);
  CHECK(agent_load(1, 1, kQueuedBytesPerLoadUnit) == 3);
}

namespace {

// How often each of loads.size() candidates is chosen in `rounds` choices.
std::vector<int> shares(const std::vector<uint64_t>& loads, AgentChoice choice, int rounds) {
  std::mt19937_64 rng(7);
  std::vector<int> seen(loads.size());
  for (int r = 0; r < rounds; ++r) {
    auto i = choose_index(loads.size(), choice, rng, [&](size_t k) { return loads[k]; });
    REQUIRE(i);
    ++seen.at(*i);
  }
  return seen;
}

}  // namespace

TEST_CASE("least-loaded: of two drawn, the lower load, so the most loaded never",
          "[server][strategy]") {
  std::mt19937_64 rng(3);
  CHECK_FALSE(choose_index(0, AgentChoice::LeastLoaded, rng, [](size_t) { return 0; }));
  CHECK(choose_index(1, AgentChoice::LeastLoaded, rng, [](size_t) { return 99; }) == size_t{0});
  // Loads 2, 1, 0: each pair is drawn a third of the time; the idle agent wins the two pairs it
  // is in, the middle one the pair {0, 1}, the busiest none.
  auto seen = shares({2, 1, 0}, AgentChoice::LeastLoaded, 6000);
  CHECK(seen[0] == 0);
  CHECK(seen[1] == Approx(2000).margin(250));
  CHECK(seen[2] == Approx(4000).margin(250));
  // Equal loads: spread evenly, as random.
  seen = shares({4, 4, 4}, AgentChoice::LeastLoaded, 6000);
  for (int n : seen) CHECK(n == Approx(2000).margin(250));
}

TEST_CASE("random: uniform whatever the loads (upstream's choice)", "[server][strategy]") {
  auto seen = shares({1000, 0, 0}, AgentChoice::Random, 6000);
  for (int n : seen) CHECK(n == Approx(2000).margin(250));
}
