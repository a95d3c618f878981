#include "socks5/rules.h"

#include <cctype>
#include <charconv>
#include <sstream>

namespace konn::socks5 {
namespace {

asio::ip::address unmap(const asio::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  }
  return a;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool parse_u16(const std::string& s, uint16_t* out) {
  unsigned v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty() || v > 65535) return false;
  *out = static_cast<uint16_t>(v);
  return true;
}

}  // namespace

std::optional<Cidr> Cidr::parse(const std::string& text) {
  auto slash = text.find('/');
  std::error_code ec;
  Cidr c;
  c.base = unmap(asio::ip::make_address(text.substr(0, slash), ec));
  if (ec) return std::nullopt;
  unsigned max = c.base.is_v4() ? 32 : 128;
  c.prefix = max;
  if (slash != std::string::npos) {
    uint16_t p = 0;
    if (!parse_u16(text.substr(slash + 1), &p) || p > max) return std::nullopt;
    c.prefix = p;
  }
  return c;
}

bool Cidr::contains(const asio::ip::address& addr) const {
  auto a = unmap(addr);
  if (a.is_v4() != base.is_v4()) return false;
  auto cmp = [this](const auto& x, const auto& y) {
    unsigned bits = prefix;
    for (size_t i = 0; i < x.size() && bits > 0; ++i) {
      unsigned take = bits >= 8 ? 8 : bits;
      uint8_t mask = static_cast<uint8_t>(0xFF << (8 - take));
      if ((x[i] & mask) != (y[i] & mask)) return false;
      bits -= take;
    }
    return true;
  };
  if (a.is_v4()) return cmp(a.to_v4().to_bytes(), base.to_v4().to_bytes());
  return cmp(a.to_v6().to_bytes(), base.to_v6().to_bytes());
}

bool glob_match(std::string_view pattern, std::string_view text) {
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  auto eq = [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  };
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || eq(pattern[p], text[t]))) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::string Rule::parse(const std::string& text, Rule* out) {
  Rule r;
  r.text = text;
  auto words = split(text, ' ');
  if (words.empty()) return "empty rule";
  if (words[0] == "allow") {
    r.allow = true;
  } else if (words[0] == "deny") {
    r.allow = false;
  } else {
    return "rule \"" + text + "\": must start with allow or deny";
  }
  for (size_t i = 1; i < words.size(); ++i) {
    auto eq = words[i].find('=');
    if (eq == std::string::npos) return "rule \"" + text + "\": want key=value, got " + words[i];
    std::string key = words[i].substr(0, eq);
    auto values = split(words[i].substr(eq + 1), ',');
    if (values.empty()) return "rule \"" + text + "\": " + key + " has no value";
    for (const auto& v : values) {
      if (key == "from" || key == "to") {
        auto c = Cidr::parse(v);
        if (!c) return "rule \"" + text + "\": bad CIDR " + v;
        (key == "from" ? r.from : r.to).push_back(*c);
      } else if (key == "user") {
        r.users.push_back(v);
      } else if (key == "host") {
        r.hosts.push_back(v);
      } else if (key == "port") {
        auto dash = v.find('-');
        uint16_t lo = 0, hi = 0;
        bool ok = dash == std::string::npos
                      ? parse_u16(v, &lo) && (hi = lo, true)
                      : parse_u16(v.substr(0, dash), &lo) && parse_u16(v.substr(dash + 1), &hi);
        if (!ok || lo > hi) return "rule \"" + text + "\": bad port or range " + v;
        r.ports.emplace_back(lo, hi);
      } else if (key == "cmd") {
        if (v != "connect" && v != "bind" && v != "udp") {
          return "rule \"" + text + "\": cmd must be connect, bind or udp";
        }
        r.commands.push_back(v);
      } else {
        return "rule \"" + text + "\": unknown key " + key;
      }
    }
  }
  *out = std::move(r);
  return {};
}

Decision RuleSet::decide(const RuleQuery& q) const {
  for (size_t i = 0; i < rules_.size(); ++i) {
    const Rule& r = rules_[i];
    auto any = [](const auto& list, auto&& pred) {
      if (list.empty()) return true;
      for (const auto& x : list) {
        if (pred(x)) return true;
      }
      return false;
    };
    bool match =
        any(r.from, [&](const Cidr& c) { return c.contains(q.client); }) &&
        any(r.users, [&](const std::string& u) { return u == q.user; }) &&
        (r.to.empty() || !q.dest_unresolved) &&
        any(r.to, [&](const Cidr& c) { return c.contains(q.dest); }) &&
        any(r.hosts,
            [&](const std::string& g) {
              return glob_match(g, q.host.empty() ? unmap(q.dest).to_string() : q.host);
            }) &&
        any(r.ports, [&](const auto& pr) { return q.port >= pr.first && q.port <= pr.second; }) &&
        any(r.commands, [&](const std::string& c) { return c == q.command; });
    if (match) return {r.allow, static_cast<int>(i), r.text};
  }
  return {default_allow_, -1, default_allow_ ? "default allow" : "default deny"};
}

}  // namespace konn::socks5
