#pragma once

#include <optional>
#include <string>
#include <vector>

#include <asio/ip/address.hpp>

namespace konn::socks5 {

// An address block ("10.0.0.0/8", "::1/128", "192.168.1.7"). IPv4-mapped IPv6 addresses match
// IPv4 blocks.
struct Cidr {
  asio::ip::address base;
  unsigned prefix = 0;
  bool contains(const asio::ip::address& a) const;
  static std::optional<Cidr> parse(const std::string& text);
};

// One allow/deny line. Every field that is set must match (AND); an unset field matches
// anything. Syntax (space separated, each field at most once, lists comma separated):
//
//   allow|deny [from=CIDR,...] [user=NAME,...] [to=CIDR,...] [host=GLOB,...] [port=N|N-M,...]
//              [cmd=connect|bind|udp,...]
//
// `to=` matches the destination IP (for a name, each resolved address); `host=` matches the
// name the client sent (case-insensitive, '*' and '?' globs), or the IP literal's text.
struct Rule {
  bool allow = true;
  std::vector<Cidr> from;
  std::vector<std::string> users;
  std::vector<Cidr> to;
  std::vector<std::string> hosts;
  std::vector<std::pair<uint16_t, uint16_t>> ports;
  std::vector<std::string> commands;  // "connect", "bind", "udp"
  std::string text;                   // as written, for logs

  // Returns "" or an error text.
  static std::string parse(const std::string& text, Rule* out);
};

// What a decision is made about.
struct RuleQuery {
  asio::ip::address client;
  std::string user;        // "" without authentication
  std::string host;        // the name sent by the client, or "" for an IP request
  asio::ip::address dest;  // the (resolved) destination address
  uint16_t port = 0;
  std::string command;  // "connect", "bind", "udp"
  // The name goes unresolved to a Konnectivity agent: `dest` is unknown, and a rule with `to=`
  // never matches (only host= and the other fields can decide).
  bool dest_unresolved = false;
};

struct Decision {
  bool allow = true;
  int rule_index = -1;  // -1: the default policy decided
  std::string rule_text;
};

// First match wins; no match → the default policy. Immutable after construction.
class RuleSet {
 public:
  RuleSet() = default;
  RuleSet(std::vector<Rule> rules, bool default_allow)
      : rules_(std::move(rules)), default_allow_(default_allow) {}
  Decision decide(const RuleQuery& q) const;
  size_t size() const { return rules_.size(); }

 private:
  std::vector<Rule> rules_;
  bool default_allow_ = true;
};

// Case-insensitive glob: '*' any run (also empty), '?' one character.
bool glob_match(std::string_view pattern, std::string_view text);

}  // namespace konn::socks5
