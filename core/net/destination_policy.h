#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <asio/ip/address.hpp>

namespace konn::core::net {

// Which destinations a dialler may connect to (the agent's --allowed-destinations). A rule is
//   [!]<target>[:<port>|:<low>-<high>]
// where <target> is an IPv4 or IPv6 address, a CIDR block, or `*` (every address of both
// families); an IPv6 target followed by a port is written in brackets ("[fd00::/8]:443"). A rule
// without a port covers every port; `!` makes it a deny rule. An address and port are allowed
// when at least one allow rule covers them and no deny rule does, whatever the order. IPv4-mapped
// IPv6 addresses (::ffff:a.b.c.d) are checked as the IPv4 address they reach; an IPv4 rule never
// covers a genuine IPv6 address, nor an IPv6 rule an IPv4 one.
class DestinationPolicy {
 public:
  // Every address except the link-local ranges cloud metadata services live in (169.254.0.0/16,
  // fe80::/10) and AWS's IPv6 metadata address fd00:ec2::254.
  static const std::vector<std::string>& default_rules();

  // Parses `rules`. nullopt when one is malformed or there is no allow rule at all (nothing could
  // be dialled); `error` then names the rule and the problem.
  static std::optional<DestinationPolicy> parse(const std::vector<std::string>& rules,
                                                std::string* error);

  bool allows(const asio::ip::address& address, uint16_t port) const;

  // The rules as given, comma-joined (for logs).
  const std::string& text() const { return text_; }

 private:
  struct Rule {
    bool deny = false;
    bool any_address = false;       // `*`
    bool v4 = false;                // family of `net` unless any_address
    std::array<uint8_t, 16> net{};  // IPv4 in the first 4 bytes
    int prefix = 0;
    uint16_t low = 0;
    uint16_t high = 65535;
  };
  static std::optional<Rule> parse_rule(const std::string& text, std::string* why);
  static bool covers(const Rule& r, bool v4, const std::array<uint8_t, 16>& bytes, uint16_t port);

  std::vector<Rule> rules_;
  std::string text_;
};

}  // namespace konn::core::net
