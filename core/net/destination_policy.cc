#include "core/net/destination_policy.h"

#include <charconv>

namespace konn::core::net {
namespace {

bool parse_number(std::string_view s, int max, int* out) {
  if (s.empty()) return false;
  int v = -1;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v < 0 || v > max) return false;
  *out = v;
  return true;
}

// "80" or "8000-8999".
bool parse_ports(std::string_view s, uint16_t* low, uint16_t* high) {
  auto dash = s.find('-');
  int lo = 0;
  int hi = 0;
  if (dash == std::string_view::npos) {
    if (!parse_number(s, 65535, &lo)) return false;
    hi = lo;
  } else if (!parse_number(s.substr(0, dash), 65535, &lo) ||
             !parse_number(s.substr(dash + 1), 65535, &hi) || hi < lo) {
    return false;
  }
  *low = static_cast<uint16_t>(lo);
  *high = static_cast<uint16_t>(hi);
  return true;
}

}  // namespace

const std::vector<std::string>& DestinationPolicy::default_rules() {
  static const std::vector<std::string> rules{"*", "!169.254.0.0/16", "!fe80::/10",
                                              "!fd00:ec2::254"};
  return rules;
}

std::optional<DestinationPolicy::Rule> DestinationPolicy::parse_rule(const std::string& text,
                                                                     std::string* why) {
  Rule r;
  std::string_view s = text;
  if (!s.empty() && s.front() == '!') {
    r.deny = true;
    s.remove_prefix(1);
  }
  std::string_view target = s;
  std::string_view ports;
  if (!s.empty() && s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string_view::npos) {
      *why = "missing ]";
      return std::nullopt;
    }
    target = s.substr(1, close - 1);
    std::string_view rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        *why = "expected :<port> after ]";
        return std::nullopt;
      }
      ports = rest.substr(1);
      if (ports.empty()) {
        *why = "empty port";
        return std::nullopt;
      }
    }
  } else if (s.find(':') == s.rfind(':')) {  // IPv4, `*`, or no port: at most one colon
    auto colon = s.find(':');
    if (colon != std::string_view::npos) {
      target = s.substr(0, colon);
      ports = s.substr(colon + 1);
      if (ports.empty()) {
        *why = "empty port";
        return std::nullopt;
      }
    }
  }  // else: an IPv6 target without a port
  if (!ports.empty() && !parse_ports(ports, &r.low, &r.high)) {
    *why = "bad port or port range \"" + std::string(ports) + "\"";
    return std::nullopt;
  }
  if (target == "*") {
    r.any_address = true;
    return r;
  }
  std::string_view address = target;
  int prefix = -1;
  if (auto slash = target.find('/'); slash != std::string_view::npos) {
    address = target.substr(0, slash);
    if (!parse_number(target.substr(slash + 1), 128, &prefix)) {
      *why = "bad prefix length";
      return std::nullopt;
    }
  }
  std::error_code ec;
  auto ip = asio::ip::make_address(std::string(address), ec);
  if (ec) {
    *why = "\"" + std::string(address) +
           "\" is not an IP address (names are not allowed: "
           "they are checked after resolution)";
    return std::nullopt;
  }
  if (ip.is_v6() && ip.to_v6().is_v4_mapped()) {
    *why = "write IPv4-mapped addresses as IPv4";
    return std::nullopt;
  }
  r.v4 = ip.is_v4();
  int bits = r.v4 ? 32 : 128;
  if (prefix > bits) {
    *why = "prefix longer than the address";
    return std::nullopt;
  }
  r.prefix = prefix < 0 ? bits : prefix;
  if (r.v4) {
    auto b = ip.to_v4().to_bytes();
    std::copy(b.begin(), b.end(), r.net.begin());
  } else {
    auto b = ip.to_v6().to_bytes();
    std::copy(b.begin(), b.end(), r.net.begin());
  }
  return r;
}

std::optional<DestinationPolicy> DestinationPolicy::parse(const std::vector<std::string>& rules,
                                                          std::string* error) {
  DestinationPolicy p;
  bool any_allow = false;
  for (const auto& text : rules) {
    std::string why;
    auto r = parse_rule(text, &why);
    if (!r) {
      *error = "\"";
      *error += text;
      *error += "\": ";
      *error += why;
      return std::nullopt;
    }
    any_allow = any_allow || !r->deny;
    p.rules_.push_back(*r);
    p.text_ += (p.text_.empty() ? "" : ",") + text;
  }
  if (!any_allow) {
    *error = "no allow rule: nothing could be dialled (\"*\" allows every address)";
    return std::nullopt;
  }
  return p;
}

bool DestinationPolicy::covers(const Rule& r, bool v4, const std::array<uint8_t, 16>& bytes,
                               uint16_t port) {
  if (port < r.low || port > r.high) return false;
  if (r.any_address) return true;
  if (r.v4 != v4) return false;
  int full = r.prefix / 8;
  for (int i = 0; i < full; ++i) {
    if (bytes[i] != r.net[i]) return false;
  }
  int rest = r.prefix % 8;
  if (rest == 0) return true;
  auto mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (bytes[full] & mask) == (r.net[full] & mask);
}

bool DestinationPolicy::allows(const asio::ip::address& address, uint16_t port) const {
  std::array<uint8_t, 16> bytes{};
  bool v4 = true;
  if (address.is_v4()) {
    auto b = address.to_v4().to_bytes();
    std::copy(b.begin(), b.end(), bytes.begin());
  } else if (address.to_v6().is_v4_mapped()) {
    // ::ffff:169.254.169.254 reaches 169.254.169.254: judged as the IPv4 address.
    auto b = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6()).to_bytes();
    std::copy(b.begin(), b.end(), bytes.begin());
  } else {
    v4 = false;
    bytes = address.to_v6().to_bytes();
  }
  bool allowed = false;
  for (const auto& r : rules_) {
    if (!covers(r, v4, bytes, port)) continue;
    if (r.deny) return false;
    allowed = true;
  }
  return allowed;
}

}  // namespace konn::core::net
