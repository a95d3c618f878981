// Flag values upstream v0.36 accepts that konn once refused: accepted now with upstream's meaning
// and a warning (proxy-server/README.md, proxy-agent/README.md).
#include <chrono>
#include <string>

#include <catch2/catch.hpp>

#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/integration/tunnel/tunnel_stack.h"

using namespace std::chrono_literals;

// reliability: proxy-server | --server-count=0 (upstream: accepted) | servercount 0 sent to agents,
// reliability+: which keep connecting to find servers | warn "--server-count=0: agents are told
// reliability+: the number of servers is unknown ..." | the agent connects, again and again
TEST_CASE("server-count 0: a warning, and agents keep looking for servers as upstream's do",
          "[e2e][options]") {
  KONN_REQUIRE_DAEMONS();
  konn::e2e::ServerSpec server;
  server.extra_args = {"--server-count=0"};
  konn::e2e::TunnelStack stack(server);  // throws unless the agent connected
  CHECK(stack.server.process().count_in_log("--server-count=0: agents are told the number of "
                                            "servers is unknown") == 1);
  // The agent (sync interval 100ms) connects again and again: each stream reaches the server,
  // which logs it, before the agent drops it as a duplicate.
  CHECK(stack.server.wait_agent_connected("agent-1", 20s, 3));
}

TEST_CASE("server-count 1: the agent stays with the one server it found", "[e2e][options]") {
  KONN_REQUIRE_DAEMONS();
  konn::e2e::TunnelStack stack;
  CHECK_FALSE(stack.server.wait_agent_connected("agent-1", 2s, 2));
  CHECK(stack.server.process().count_in_log("--server-count") == 0);
}

// reliability: proxy-agent | --agent-identifiers=ipv4=node-a&default-route=maybe (upstream:
// reliability+: accepted) | started, identifiers sent as given; the server keeps them as strings |
// reliability+: warn "--agent-identifiers: ipv4 "node-a" is not an IPv4 address: sent as is ..." |
// reliability+: the agent connects to a konn server
TEST_CASE("agent identifiers that do not parse: a warning, and a konn server takes the agent",
          "[e2e][options]") {
  KONN_REQUIRE_DAEMONS();
  konn::e2e::AgentSpec agent;
  agent.extra_args = {"--agent-identifiers=ipv4=node-a&default-route=maybe"};
  konn::e2e::TunnelStack stack({}, agent);  // throws unless the server took the agent
  CHECK(stack.agent->count_in_log(
            "--agent-identifiers: ipv4 \"node-a\" is not an IPv4 address: sent as is") == 1);
  CHECK(stack.server.process().count_in_log("rejected: bad agentidentifiers") == 0);
}
