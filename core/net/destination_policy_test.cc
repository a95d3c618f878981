#include "core/net/destination_policy.h"

#include <catch2/catch.hpp>

using konn::core::net::DestinationPolicy;

namespace {

DestinationPolicy policy(const std::vector<std::string>& rules) {
  std::string error;
  auto p = DestinationPolicy::parse(rules, &error);
  INFO(error);
  REQUIRE(p);
  return *p;
}

bool allows(const DestinationPolicy& p, const std::string& ip, uint16_t port) {
  return p.allows(asio::ip::make_address(ip), port);
}

std::string refusal(const std::vector<std::string>& rules) {
  std::string error;
  auto p = DestinationPolicy::parse(rules, &error);
  CHECK_FALSE(p);
  return error;
}

}  // namespace

TEST_CASE("the default policy refuses the metadata addresses only", "[net]") {
  auto p = policy(DestinationPolicy::default_rules());
  CHECK(allows(p, "10.0.0.5", 10250));
  CHECK(allows(p, "127.0.0.1", 80));
  CHECK(allows(p, "8.8.8.8", 443));
  CHECK(allows(p, "fd00::5", 443));
  CHECK(allows(p, "2001:db8::1", 80));
  CHECK_FALSE(allows(p, "169.254.169.254", 80));
  CHECK_FALSE(allows(p, "169.254.0.1", 443));
  CHECK_FALSE(allows(p, "fe80::1", 80));
  CHECK_FALSE(allows(p, "fd00:ec2::254", 80));
  CHECK(allows(p, "fd00:ec2::253", 80));
  // The IPv4 metadata address written as IPv4-mapped IPv6 reaches the same place.
  CHECK_FALSE(allows(p, "::ffff:169.254.169.254", 80));
  CHECK(allows(p, "::ffff:10.0.0.5", 80));
}

TEST_CASE("allow and deny rules with CIDRs and ports, denies win whatever the order", "[net]") {
  auto p = policy(
      {"!10.0.0.7", "10.0.0.0/8:10250", "10.96.0.0/12", "[fd00::/8]:443-444", "!10.96.0.10:53"});
  CHECK(allows(p, "10.1.2.3", 10250));
  CHECK_FALSE(allows(p, "10.1.2.3", 10251));
  CHECK_FALSE(allows(p, "10.0.0.7", 10250));  // denied, although 10.0.0.0/8 allows it
  CHECK(allows(p, "10.96.5.5", 1));
  CHECK(allows(p, "10.111.255.255", 65535));
  CHECK_FALSE(allows(p, "10.112.0.0", 80));  // outside both /8:10250 and /12
  CHECK_FALSE(allows(p, "10.96.0.10", 53));
  CHECK(allows(p, "10.96.0.10", 54));
  CHECK(allows(p, "fd12::1", 443));
  CHECK(allows(p, "fd12::1", 444));
  CHECK_FALSE(allows(p, "fd12::1", 445));
  CHECK_FALSE(allows(p, "fe80::1", 443));
  CHECK_FALSE(allows(p, "192.168.0.1", 10250));  // no rule allows it
}

TEST_CASE("families stay apart, * covers both, prefixes of any length", "[net]") {
  auto v4all = policy({"0.0.0.0/0"});
  CHECK(allows(v4all, "1.2.3.4", 1));
  CHECK(allows(v4all, "::ffff:1.2.3.4", 1));
  CHECK_FALSE(allows(v4all, "::1", 1));
  auto no_v6 = policy({"*", "!::/0"});
  CHECK(allows(no_v6, "1.2.3.4", 80));
  CHECK_FALSE(allows(no_v6, "2001:db8::1", 80));
  auto any_443 = policy({"*:443"});
  CHECK(allows(any_443, "1.2.3.4", 443));
  CHECK(allows(any_443, "::1", 443));
  CHECK_FALSE(allows(any_443, "::1", 80));
  auto odd = policy({"192.168.4.0/22", "2001:db8:8000::/33"});
  CHECK(allows(odd, "192.168.7.255", 1));
  CHECK_FALSE(allows(odd, "192.168.8.0", 1));
  CHECK(allows(odd, "2001:db8:ffff::1", 1));
  CHECK_FALSE(allows(odd, "2001:db8:7fff::1", 1));
}

TEST_CASE("malformed rules are refused, naming the rule", "[net]") {
  CHECK(refusal({"10.0.0.0/33"}).find("10.0.0.0/33") != std::string::npos);
  CHECK(refusal({"kubernetes.default"}).find("not an IP address") != std::string::npos);
  CHECK(refusal({"10.0.0.1:99999"}).find("bad port") != std::string::npos);
  CHECK(refusal({"10.0.0.1:90-80"}).find("bad port") != std::string::npos);
  CHECK(refusal({"10.0.0.1:"}).find("empty port") != std::string::npos);
  CHECK(refusal({"[fd00::1"}).find("missing ]") != std::string::npos);
  CHECK(refusal({"[fd00::1]443"}).find("expected :") != std::string::npos);
  CHECK(refusal({"::ffff:10.0.0.1"}).find("IPv4-mapped") != std::string::npos);
  CHECK(refusal({"!169.254.0.0/16"}).find("no allow rule") != std::string::npos);
  CHECK(refusal({}).find("no allow rule") != std::string::npos);
}
