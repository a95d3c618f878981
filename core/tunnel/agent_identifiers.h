#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace konn::core::tunnel {

// What an agent says it can reach, sent in the `agentidentifiers` header as a URL query string:
// `host=node1&ipv4=10.0.0.5&ipv6=fd00::5&cidr=10.0.0.0/24&default-route=true`. Keys may repeat.
struct AgentIdentifiers {
  std::vector<std::string> hosts;
  std::vector<std::string> ipv4;
  std::vector<std::string> ipv6;
  std::vector<std::string> cidrs;
  bool default_route = false;

  bool empty() const {
    return hosts.empty() && ipv4.empty() && ipv6.empty() && cidrs.empty() && !default_route;
  }
  // Whether the destination host (no port, no brackets) is one this agent claims: an exact
  // host/ipv4/ipv6 match (upstream's destHost) or, beyond upstream, an IP inside a cidr.
  bool serves_host(std::string_view host) const;
};

// Parses the query string. Unknown keys are errors when `strict`, ignored otherwise (the server
// reading a peer's header, as upstream does). Values are percent-decoded; when `strict`,
// ipv4/ipv6/cidr values must parse, hosts must not be empty and default-route must be a boolean;
// otherwise such values are kept as strings (a default-route that is no boolean is false), as
// upstream's server keeps them. On error, `error` says which key and why.
std::optional<AgentIdentifiers> parse_agent_identifiers(std::string_view query, bool strict,
                                                        std::string* error = nullptr);

}  // namespace konn::core::tunnel
