#include "socks5/rules.h"

#include <catch2/catch.hpp>

using namespace konn::socks5;

namespace {
RuleSet make(std::vector<std::string> lines, bool default_allow) {
  std::vector<Rule> rules;
  for (const auto& l : lines) {
    Rule r;
    auto err = Rule::parse(l, &r);
    REQUIRE(err.empty());
    rules.push_back(r);
  }
  return RuleSet(rules, default_allow);
}
asio::ip::address ip(const char* s) { return asio::ip::make_address(s); }
}  // namespace

TEST_CASE("cidr matching, including IPv4-mapped addresses", "[rules]") {
  auto c = Cidr::parse("10.0.0.0/8");
  REQUIRE(c);
  CHECK(c->contains(ip("10.200.1.1")));
  CHECK(c->contains(ip("::ffff:10.1.1.1")));
  CHECK_FALSE(c->contains(ip("11.0.0.1")));
  auto v6 = Cidr::parse("fd00::/8");
  REQUIRE(v6);
  CHECK(v6->contains(ip("fd12::1")));
  CHECK_FALSE(v6->contains(ip("10.0.0.1")));
  auto host = Cidr::parse("192.168.1.7");
  REQUIRE(host);
  CHECK(host->contains(ip("192.168.1.7")));
  CHECK_FALSE(host->contains(ip("192.168.1.8")));
  CHECK_FALSE(Cidr::parse("10.0.0.0/33"));
  CHECK_FALSE(Cidr::parse("nonsense"));
}

TEST_CASE("globs are case-insensitive", "[rules]") {
  CHECK(glob_match("*.svc.cluster.local", "api.default.SVC.cluster.local"));
  CHECK(glob_match("kube-?", "kube-1"));
  CHECK_FALSE(glob_match("*.example.com", "example.com"));
  CHECK(glob_match("*", ""));
}

TEST_CASE("first match wins, default policy otherwise", "[rules]") {
  auto rs = make({"deny to=169.254.0.0/16", "allow user=alice port=443,6443",
                  "allow from=127.0.0.0/8 host=*.local port=8000-9000 cmd=connect"},
                 false);
  RuleQuery q{ip("127.0.0.1"), "alice", "", ip("169.254.169.254"), 443, "connect"};
  auto d = rs.decide(q);
  CHECK_FALSE(d.allow);
  CHECK(d.rule_index == 0);
  q.dest = ip("10.0.0.1");
  CHECK(rs.decide(q).allow);
  CHECK(rs.decide(q).rule_index == 1);
  q.user = "bob";
  CHECK_FALSE(rs.decide(q).allow);
  CHECK(rs.decide(q).rule_index == -1);
  q.host = "db.local";
  q.port = 8080;
  CHECK(rs.decide(q).allow);
  q.command = "udp";
  CHECK_FALSE(rs.decide(q).allow);
}

TEST_CASE("rule syntax errors are reported", "[rules]") {
  Rule r;
  CHECK_FALSE(Rule::parse("permit all", &r).empty());
  CHECK_FALSE(Rule::parse("allow port=70000", &r).empty());
  CHECK_FALSE(Rule::parse("allow port=9-1", &r).empty());
  CHECK_FALSE(Rule::parse("allow color=red", &r).empty());
  CHECK_FALSE(Rule::parse("deny cmd=ping", &r).empty());
  CHECK(Rule::parse("deny", &r).empty());
}

TEST_CASE("rules: to= never matches a name sent unresolved", "[socks5][rules]") {
  std::vector<Rule> rules(2);
  REQUIRE(Rule::parse("deny to=10.0.0.0/8", &rules[0]).empty());
  REQUIRE(Rule::parse("allow host=*.svc.cluster.local", &rules[1]).empty());
  RuleSet set(std::move(rules), false);
  RuleQuery q;
  q.client = asio::ip::make_address("127.0.0.1");
  q.host = "api.default.svc.cluster.local";
  q.port = 443;
  q.command = "connect";
  q.dest_unresolved = true;
  auto d = set.decide(q);
  CHECK(d.allow);
  CHECK(d.rule_index == 1);
  q.host = "example.com";
  CHECK_FALSE(set.decide(q).allow);  // the default policy (deny) decides
}
