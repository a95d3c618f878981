#include "proxy-server/backend/proxy_strategy.h"

#include <set>

#include <catch2/catch.hpp>

using namespace konn::server;
using konn::core::tunnel::parse_agent_identifiers;

TEST_CASE("default picks any agent, preferring non-draining", "[server][strategy]") {
  std::mt19937_64 rng(1);
  konn::core::tunnel::AgentIdentifiers none;
  std::vector<Candidate> c{{&none, true}, {&none, false}, {&none, false}};
  std::set<size_t> seen;
  for (int i = 0; i < 200; ++i) {
    auto pick = select_backend(c, {ProxyStrategy::Default}, "10.0.0.1", rng);
    REQUIRE(pick);
    seen.insert(*pick);
  }
  CHECK(seen == std::set<size_t>{1, 2});  // spread over both ready agents, never the draining
  std::vector<Candidate> all_draining{{&none, true}};
  CHECK(select_backend(all_draining, {ProxyStrategy::Default}, "x", rng) == size_t{0});
  CHECK_FALSE(select_backend({}, {ProxyStrategy::Default}, "x", rng));
}

TEST_CASE("destHost matches identifiers, defaultRoute the flag, in order", "[server][strategy]") {
  std::mt19937_64 rng(2);
  auto a = *parse_agent_identifiers("host=node-a&ipv4=10.0.0.1", true);
  auto b = *parse_agent_identifiers("cidr=10.9.0.0/16&default-route=true", true);
  std::vector<Candidate> c{{&a, false}, {&b, false}};
  std::vector<ProxyStrategy> s{ProxyStrategy::DestHost, ProxyStrategy::DefaultRoute};
  CHECK(select_backend(c, s, "node-a", rng) == size_t{0});
  CHECK(select_backend(c, s, "10.0.0.1", rng) == size_t{0});
  CHECK(select_backend(c, s, "10.9.3.3", rng) == size_t{1});      // cidr
  CHECK(select_backend(c, s, "elsewhere", rng) == size_t{1});     // falls to defaultRoute
  CHECK_FALSE(select_backend(c, {ProxyStrategy::DestHost}, "elsewhere", rng));
  CHECK(parse_proxy_strategy("destHost") == ProxyStrategy::DestHost);
  CHECK_FALSE(parse_proxy_strategy("cidr"));
}
