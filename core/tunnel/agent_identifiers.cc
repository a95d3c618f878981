#include "core/tunnel/agent_identifiers.h"

#include <asio/ip/address.hpp>
#include <asio/ip/network_v4.hpp>
#include <asio/ip/network_v6.hpp>

#include "core/net/url_escape.h"

namespace konn::core::tunnel {
namespace {

bool in_cidr(const asio::ip::address& addr, const std::string& cidr) {
  std::error_code ec;
  if (addr.is_v4()) {
    auto net = asio::ip::make_network_v4(cidr, ec);
    if (ec) return false;
    auto a = addr.to_v4().to_uint();
    auto mask = net.netmask().to_uint();
    return (a & mask) == (net.network().to_uint() & mask);
  }
  auto net = asio::ip::make_network_v6(cidr, ec);
  if (ec) return false;
  auto a = addr.to_v6().to_bytes();
  auto n = net.network().to_bytes();
  unsigned bits = net.prefix_length();
  for (unsigned i = 0; i < 16 && bits > 0; ++i) {
    unsigned take = bits >= 8 ? 8 : bits;
    auto mask = static_cast<uint8_t>(0xFF << (8 - take));
    if ((a[i] & mask) != (n[i] & mask)) return false;
    bits -= take;
  }
  return true;
}

}  // namespace

bool AgentIdentifiers::serves_host(std::string_view host) const {
  for (const auto& list : {&hosts, &ipv4, &ipv6}) {
    for (const auto& v : *list) {
      if (v == host) return true;
    }
  }
  if (cidrs.empty()) return false;
  std::error_code ec;
  auto addr = asio::ip::make_address(std::string(host), ec);
  if (ec) return false;
  for (const auto& c : cidrs) {
    if (in_cidr(addr, c)) return true;
  }
  return false;
}

std::optional<AgentIdentifiers> parse_agent_identifiers(std::string_view query, bool strict,
                                                        std::string* error) {
  AgentIdentifiers ids;
  auto fail = [&](std::string why) -> std::optional<AgentIdentifiers> {
    if (error != nullptr) *error = std::move(why);
    return std::nullopt;
  };
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    auto key = net::url_unescape(pair.substr(0, eq), net::UrlPart::QueryComponent);
    auto value = net::url_unescape(eq == std::string_view::npos ? "" : pair.substr(eq + 1),
                                   net::UrlPart::QueryComponent);
    if (!key || !value) return fail("malformed percent-encoding in \"" + std::string(pair) + "\"");
    std::error_code ec;
    // A value that does not parse is an error when `strict`; otherwise it is kept as the string
    // it is (upstream's server keeps every value as a string: it matches a dial to that exact
    // host, and a cidr that does not parse matches nothing), and a default-route that is no
    // boolean is false, as strconv.ParseBool's error makes it upstream.
    if (*key == "host") {
      if (value->empty() && strict) return fail("host: empty value");
      ids.hosts.push_back(*value);
    } else if (*key == "ipv4") {
      asio::ip::make_address_v4(*value, ec);
      if (ec && strict) return fail("ipv4: \"" + *value + "\" is not an IPv4 address");
      ids.ipv4.push_back(*value);
    } else if (*key == "ipv6") {
      asio::ip::make_address_v6(*value, ec);
      if (ec && strict) return fail("ipv6: \"" + *value + "\" is not an IPv6 address");
      ids.ipv6.push_back(*value);
    } else if (*key == "cidr") {
      asio::ip::make_network_v4(*value, ec);
      if (ec) {
        ec.clear();
        asio::ip::make_network_v6(*value, ec);
      }
      if (ec && strict) return fail("cidr: \"" + *value + "\" is not a CIDR block");
      ids.cidrs.push_back(*value);
    } else if (*key == "default-route") {
      // strconv.ParseBool's spellings.
      if (*value == "true" || *value == "1" || *value == "True" || *value == "TRUE" ||
          *value == "t" || *value == "T") {
        ids.default_route = true;
      } else if (*value == "false" || *value == "0" || *value == "False" || *value == "FALSE" ||
                 *value == "f" || *value == "F") {
        ids.default_route = false;
      } else if (strict) {
        return fail("default-route: \"" + *value + "\" is not a boolean");
      } else {
        ids.default_route = false;
      }
    } else if (strict) {
      return fail("unknown identifier key \"" + *key + "\" (want host, ipv4, ipv6, cidr, "
                  "default-route)");
    }
  }
  return ids;
}

}  // namespace konn::core::tunnel
