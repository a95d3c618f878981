#include "proxy-server/backend/agent_pools.h"

#include <map>
#include <string>

#include <catch2/catch.hpp>

using namespace konn::server;
using konn::core::tunnel::AgentIdentifiers;
using konn::core::tunnel::parse_agent_identifiers;

namespace {

// What AgentPools needs from an agent stream, with the load set by the test.
struct FakeAgent {
  std::string name;
  AgentIdentifiers ids;
  bool drain = false;
  uint64_t work = 0;

  const AgentIdentifiers& identifiers() const { return ids; }
  bool draining() const { return drain; }
  uint64_t load() const { return work; }
};

FakeAgent agent(std::string name, std::string_view identifiers = "", uint64_t work = 0) {
  return FakeAgent{std::move(name), *parse_agent_identifiers(identifiers, true), false, work};
}

// Who gets `rounds` dials to `dest`, by name ("" for none).
std::map<std::string, int> dials(const AgentPools<FakeAgent>& pools,
                                 const std::vector<ProxyStrategy>& strategies,
                                 std::string_view dest, int rounds = 3000) {
  std::mt19937_64 rng(11);
  std::map<std::string, int> seen;
  for (int i = 0; i < rounds; ++i) {
    const FakeAgent* a = pools.pick(strategies, dest, rng);
    ++seen[a != nullptr ? a->name : ""];
  }
  return seen;
}

const std::vector<ProxyStrategy> kDefault{ProxyStrategy::Default};

}  // namespace

TEST_CASE("least-loaded: an agent with more work gets fewer dials", "[server][strategy]") {
  auto a = agent("a", "", 0);
  auto b = agent("b", "", 0);
  auto c = agent("c", "", 0);
  AgentPools<FakeAgent> pools(AgentChoice::LeastLoaded);
  for (auto* x : {&a, &b, &c}) pools.insert(x);
  auto even = dials(pools, kDefault, "10.0.0.1");
  for (const auto* name : {"a", "b", "c"}) CHECK(even[name] == Approx(1000).margin(150));
  // a holds tunnels (or pending dials, or queued bytes: all one load): it is chosen never, as
  // long as it carries more than both others.
  a.work = 5;
  b.work = 1;
  auto skewed = dials(pools, kDefault, "10.0.0.1");
  CHECK(skewed["a"] == 0);
  CHECK(skewed["b"] == Approx(1000).margin(150));
  CHECK(skewed["c"] == Approx(2000).margin(150));
  // Its work done, it is back in turn.
  a.work = 0;
  b.work = 0;
  CHECK(dials(pools, kDefault, "x")["a"] == Approx(1000).margin(150));
}

TEST_CASE("random: the old uniform choice, loads ignored", "[server][strategy]") {
  auto a = agent("a", "", 500);
  auto b = agent("b");
  auto c = agent("c");
  AgentPools<FakeAgent> pools(AgentChoice::Random);
  for (auto* x : {&a, &b, &c}) pools.insert(x);
  auto seen = dials(pools, kDefault, "10.0.0.1");
  for (const auto* name : {"a", "b", "c"}) CHECK(seen[name] == Approx(1000).margin(150));
}

TEST_CASE("draining agents only when every candidate drains", "[server][strategy]") {
  for (auto choice : {AgentChoice::LeastLoaded, AgentChoice::Random}) {
    auto idle_draining = agent("d", "", 0);
    idle_draining.drain = true;  // drained before it joined
    auto busy = agent("busy", "", 50);
    auto later = agent("later", "", 0);
    AgentPools<FakeAgent> pools(choice);
    pools.insert(&idle_draining);
    pools.insert(&busy);
    CHECK(dials(pools, kDefault, "x") == std::map<std::string, int>{{"busy", 3000}});
    pools.insert(&later);
    later.drain = true;  // DRAIN after it joined
    pools.mark_draining(&later);
    CHECK(dials(pools, kDefault, "x") == std::map<std::string, int>{{"busy", 3000}});
    // Every candidate drains: they serve (least-loaded: the idle ones first) rather than none.
    pools.erase(&busy);
    auto fallback = dials(pools, kDefault, "x");
    CHECK(fallback["d"] + fallback["later"] == 3000);
    CHECK(fallback["d"] > 1000);
    CHECK(fallback["later"] > 1000);
    CHECK(fallback[""] == 0);
    std::mt19937_64 rng(1);
    CHECK(pools.pick_ready(rng) == nullptr);  // no placement guess on a draining agent
    pools.erase(&idle_draining);
    pools.erase(&later);
    CHECK(dials(pools, kDefault, "x") == std::map<std::string, int>{{"", 3000}});
  }
}

TEST_CASE("destHost: agents sharing an identifier share its dials, by load", "[server][strategy]") {
  // Three agents claim node-a (a DaemonSet's pods on one node, or a shared ipv4); one claims
  // node-b; one is the default route.
  auto a1 = agent("a1", "host=node-a&ipv4=10.0.0.1", 4);
  auto a2 = agent("a2", "host=node-a&ipv4=10.0.0.1", 0);
  auto a3 = agent("a3", "host=node-a&host=node-a", 0);  // a repeated value counts once
  auto b = agent("b", "host=node-b");
  auto r = agent("r", "default-route=true", 0);
  AgentPools<FakeAgent> pools(AgentChoice::LeastLoaded);
  for (auto* x : {&a1, &a2, &a3, &b, &r}) pools.insert(x);
  const std::vector<ProxyStrategy> s{ProxyStrategy::DestHost, ProxyStrategy::DefaultRoute};
  auto node_a = dials(pools, s, "node-a");
  CHECK(node_a.count("b") == 0);
  CHECK(node_a.count("r") == 0);
  CHECK(node_a["a1"] == 0);  // the busy one of the three
  CHECK(node_a["a2"] == Approx(1500).margin(200));
  CHECK(node_a["a3"] == Approx(1500).margin(200));
  auto ip = dials(pools, s, "10.0.0.1");  // a3 did not claim the address
  CHECK(ip == std::map<std::string, int>{{"a2", 3000}});
  CHECK(dials(pools, s, "node-b") == std::map<std::string, int>{{"b", 3000}});
  CHECK(dials(pools, s, "elsewhere") == std::map<std::string, int>{{"r", 3000}});
  CHECK(dials(pools, {ProxyStrategy::DestHost}, "elsewhere") ==
        std::map<std::string, int>{{"", 3000}});
  // The agents leave one by one; the identifier's set follows.
  pools.erase(&a2);
  pools.erase(&a3);
  CHECK(dials(pools, s, "node-a") == std::map<std::string, int>{{"a1", 3000}});
  pools.erase(&a1);
  CHECK(dials(pools, s, "node-a") == std::map<std::string, int>{{"r", 3000}});
}

TEST_CASE("destHost: cidr agents join exact matches, then defaultRoute", "[server][strategy]") {
  auto exact = agent("exact", "ipv4=10.9.3.3", 3);
  auto wide = agent("wide", "cidr=10.9.0.0/16&default-route=true", 0);
  auto both = agent("both", "ipv4=10.9.3.3&cidr=10.9.3.0/24", 9);  // counted once
  AgentPools<FakeAgent> pools(AgentChoice::Random);
  for (auto* x : {&exact, &wide, &both}) pools.insert(x);
  const std::vector<ProxyStrategy> s{ProxyStrategy::DestHost, ProxyStrategy::DefaultRoute};
  auto seen = dials(pools, s, "10.9.3.3");
  for (const auto* name : {"exact", "wide", "both"}) CHECK(seen[name] == Approx(1000).margin(150));
  CHECK(dials(pools, s, "10.9.200.1") == std::map<std::string, int>{{"wide", 3000}});
  CHECK(dials(pools, s, "node-z") == std::map<std::string, int>{{"wide", 3000}});
  AgentPools<FakeAgent> loaded(AgentChoice::LeastLoaded);
  for (auto* x : {&exact, &wide, &both}) loaded.insert(x);
  wide.drain = true;
  loaded.mark_draining(&wide);  // cidr agents are checked at pick time; it drains now
  auto busy = dials(loaded, s, "10.9.3.3");
  CHECK(busy == std::map<std::string, int>{{"exact", 3000}});  // less loaded than "both"
}

TEST_CASE("count: each strategy's candidates, as ready_backends reports them", "[server][strategy]") {
  auto a = agent("a", "host=node-a&ipv4=10.0.0.1&host=node-a");  // a repeated value counts once
  auto b = agent("b", "host=node-b&ipv4=10.0.0.1&default-route=true");
  auto c = agent("c", "cidr=10.8.0.0/16&cidr=10.8.0.0/16");
  auto d = agent("d", "cidr=10.8.0.0/16&cidr=10.9.0.0/16&host=10.9.0.0/16");
  AgentPools<FakeAgent> pools;
  for (auto* x : {&a, &b, &c, &d}) pools.insert(x);
  CHECK(pools.count(ProxyStrategy::Default) == 4);
  CHECK(pools.count(ProxyStrategy::DefaultRoute) == 1);
  // node-a, node-b, 10.0.0.1, 10.8.0.0/16, and 10.9.0.0/16 once (as a host and as a cidr).
  CHECK(pools.count(ProxyStrategy::DestHost) == 5);
  b.drain = true;
  pools.mark_draining(&b);  // a draining agent is still a candidate
  CHECK(pools.count(ProxyStrategy::DefaultRoute) == 1);
  pools.erase(&c);  // d still announces 10.8.0.0/16
  CHECK(pools.count(ProxyStrategy::DestHost) == 5);
  pools.erase(&d);
  CHECK(pools.count(ProxyStrategy::DestHost) == 3);
  pools.erase(&a);
  CHECK(pools.count(ProxyStrategy::DestHost) == 2);
  CHECK(pools.count(ProxyStrategy::Default) == 1);
  pools.erase(&b);
  for (auto s : {ProxyStrategy::Default, ProxyStrategy::DefaultRoute, ProxyStrategy::DestHost}) {
    CHECK(pools.count(s) == 0);
  }
}
