#include "core/tunnel/agent_identifiers.h"

#include <catch2/catch.hpp>

using konn::core::tunnel::parse_agent_identifiers;

TEST_CASE("agent identifiers parse as a URL query", "[tunnel]") {
  auto ids = parse_agent_identifiers(
      "host=node-1&ipv4=10.0.0.5&ipv6=fd00%3A%3A5&cidr=10.1.0.0/16&default-route=true", true);
  REQUIRE(ids);
  CHECK(ids->hosts == std::vector<std::string>{"node-1"});
  CHECK(ids->ipv6 == std::vector<std::string>{"fd00::5"});
  CHECK(ids->default_route);
  CHECK(ids->serves_host("node-1"));
  CHECK(ids->serves_host("10.0.0.5"));
  CHECK(ids->serves_host("fd00::5"));
  CHECK(ids->serves_host("10.1.200.3"));   // inside the cidr: beyond upstream
  CHECK_FALSE(ids->serves_host("10.2.0.1"));
  CHECK_FALSE(ids->serves_host("node-2"));
  REQUIRE(parse_agent_identifiers("", true));
  CHECK(parse_agent_identifiers("", true)->empty());
}

TEST_CASE("bad agent identifiers name the key", "[tunnel]") {
  std::string err;
  CHECK_FALSE(parse_agent_identifiers("ipv4=300.1.1.1", true, &err));
  CHECK(err.find("ipv4") != std::string::npos);
  CHECK_FALSE(parse_agent_identifiers("uid=5", true, &err));
  CHECK(err.find("uid") != std::string::npos);
  CHECK(parse_agent_identifiers("uid=5", false, &err));  // a server ignores unknown keys
  CHECK_FALSE(parse_agent_identifiers("cidr=10.0.0.0/40", true, &err));
  CHECK_FALSE(parse_agent_identifiers("host=%zz", true, &err));
  CHECK_FALSE(parse_agent_identifiers("default-route=maybe", true, &err));
}

TEST_CASE("a server keeps identifier values that do not parse, as upstream's does", "[tunnel]") {
  std::string err;
  auto ids = parse_agent_identifiers(
      "ipv4=node-a&ipv6=x&cidr=10.0.0.0/40&host=&default-route=maybe", false, &err);
  REQUIRE(ids);
  CHECK(ids->ipv4 == std::vector<std::string>{"node-a"});
  CHECK(ids->ipv6 == std::vector<std::string>{"x"});
  CHECK(ids->cidrs == std::vector<std::string>{"10.0.0.0/40"});
  CHECK_FALSE(ids->default_route);
  // Matched as strings: a dial to "node-a" finds it; the bad cidr matches nothing.
  CHECK(ids->serves_host("node-a"));
  CHECK_FALSE(ids->serves_host("10.0.0.1"));
  // strconv.ParseBool's spellings.
  CHECK(parse_agent_identifiers("default-route=t", true)->default_route);
  CHECK(parse_agent_identifiers("default-route=T", false)->default_route);
  CHECK_FALSE(parse_agent_identifiers("default-route=F", true)->default_route);
  // Malformed escapes stay errors (upstream's url.ParseQuery refuses them too).
  CHECK_FALSE(parse_agent_identifiers("host=%zz", false, &err));
}
