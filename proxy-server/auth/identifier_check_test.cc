#include "proxy-server/auth/identifier_check.h"

#include <catch2/catch.hpp>

using konn::server::unproven_identifiers;

namespace {

konn::core::tunnel::AgentIdentifiers ids(const std::string& query) {
  auto parsed = konn::core::tunnel::parse_agent_identifiers(query, false);
  REQUIRE(parsed);
  return *parsed;
}

konn::core::tls::CertificateNames node_a() {
  konn::core::tls::CertificateNames c;
  c.common_name = "system:node:node-a";
  c.dns = {"node-a", "node-a.example"};
  c.ips = {asio::ip::make_address("10.0.0.5"), asio::ip::make_address("fd00::5")};
  return c;
}

}  // namespace

TEST_CASE("identifiers the certificate proves are admitted", "[server][auth]") {
  CHECK(unproven_identifiers(ids("host=node-a&ipv4=10.0.0.5"), node_a(), {}).empty());
  CHECK(unproven_identifiers(ids("host=NODE-A.example&ipv6=fd00:0::5"), node_a(), {}).empty());
  CHECK(unproven_identifiers(ids(""), node_a(), {}).empty());
}

TEST_CASE("identifiers the certificate does not prove are listed", "[server][auth]") {
  auto out = unproven_identifiers(
      ids("host=node-b&ipv4=10.0.0.5&ipv4=10.0.0.6&ipv6=fd00::6&host=node-a"), node_a(), {});
  CHECK(out == std::vector<std::string>{"host=node-b", "ipv4=10.0.0.6", "ipv6=fd00::6"});
  // An IP written as a host name is not an IP SAN match, nor a DNS name match.
  CHECK(unproven_identifiers(ids("host=10.0.0.5"), node_a(), {}) ==
        std::vector<std::string>{"host=10.0.0.5"});
}

TEST_CASE("cidr and default-route only for route agents", "[server][auth]") {
  auto claims = ids("cidr=10.0.0.0/8&default-route=true");
  CHECK(unproven_identifiers(claims, node_a(), {}) ==
        std::vector<std::string>{"cidr=10.0.0.0/8", "default-route=true"});
  CHECK(unproven_identifiers(claims, node_a(), {"gateway"}).size() == 2);
  CHECK(unproven_identifiers(claims, node_a(), {"system:node:node-a"}).empty());  // by CN
  CHECK(unproven_identifiers(claims, node_a(), {"Node-A.example"}).empty());      // by DNS SAN
}
