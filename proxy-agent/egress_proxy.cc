#include "proxy-agent/egress_proxy.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "core/config/validation.h"
#include "core/kube/kubeconfig.h"
#include "core/net/url_escape.h"

namespace konn::agent {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

// An address as Go's net.IP after To4(): 4 bytes for IPv4 and IPv4-mapped IPv6, else 16.
struct Ip {
  bool v4 = false;
  unsigned char bytes[16] = {};
};

std::optional<Ip> parse_ip(std::string_view text) {
  std::string s(text);
  Ip ip;
  in_addr a4{};
  if (inet_pton(AF_INET, s.c_str(), &a4) == 1) {
    ip.v4 = true;
    std::memcpy(ip.bytes, &a4, 4);
    return ip;
  }
  in6_addr a6{};
  if (inet_pton(AF_INET6, s.c_str(), &a6) != 1) return std::nullopt;
  constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a6.s6_addr, kMapped, 12) == 0) {
    ip.v4 = true;
    std::memcpy(ip.bytes, a6.s6_addr + 12, 4);
  } else {
    std::memcpy(ip.bytes, a6.s6_addr, 16);
  }
  return ip;
}

bool is_loopback(const Ip& ip) {
  if (ip.v4) return ip.bytes[0] == 127;
  constexpr unsigned char kOne[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return std::memcmp(ip.bytes, kOne, 16) == 0;
}

bool prefix_equal(const unsigned char* a, const unsigned char* b, int bits) {
  int full = bits / 8;
  if (std::memcmp(a, b, static_cast<size_t>(full)) != 0) return false;
  int rest = bits % 8;
  if (rest == 0) return true;
  auto mask = static_cast<unsigned char>(0xff << (8 - rest));
  return (a[full] & mask) == (b[full] & mask);
}

// Go's net.SplitHostPort: "host:port" or "[host]:port"; false when there is no port or the
// brackets or colons do not fit.
bool split_host_port(std::string_view s, std::string* host, std::string* port) {
  if (!s.empty() && s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return false;
    }
    *host = std::string(s.substr(1, close - 1));
    *port = std::string(s.substr(close + 2));
    return port->find_first_of("[]:") == std::string::npos;
  }
  auto colon = s.rfind(':');
  if (colon == std::string_view::npos) return false;
  if (s.substr(0, colon).find(':') != std::string_view::npos) return false;  // too many colons
  *host = std::string(s.substr(0, colon));
  *port = std::string(s.substr(colon + 1));
  return host->find_first_of("[]") == std::string::npos;
}

const char* getenv_nonempty(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

}  // namespace

std::string EgressProxy::address() const {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string EgressProxy::redacted() const {
  return "http://" + (has_credentials ? username + "@" : std::string()) + address();
}

std::string EgressProxy::authorization() const {
  if (!has_credentials) return {};
  return "Basic " + core::kube::encode_base64(username + ":" + password);
}

std::optional<EgressProxy> parse_proxy_url(std::string_view url, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<EgressProxy> {
    *error = why;
    return std::nullopt;
  };
  if (url.empty()) return fail("empty proxy URL");
  std::string_view rest = url;
  if (auto sep = rest.find("://"); sep != std::string_view::npos) {
    std::string scheme = lower(rest.substr(0, sep));
    if (scheme != "http") {
      return fail("scheme \"" + scheme +
                  "\" is not supported: only http:// proxies (the CONNECT goes in clear; TLS to "
                  "the proxy-server runs inside the tunnel)");
    }
    rest.remove_prefix(sep + 3);
  }
  auto end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, end);
  if (end != std::string_view::npos && rest.substr(end) != "/") {
    return fail("a proxy URL has no path, query or fragment: \"" + std::string(rest.substr(end)) +
                "\"");
  }
  EgressProxy p;
  if (auto at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority.remove_prefix(at + 1);
    auto colon = userinfo.find(':');
    auto user = core::net::url_unescape(userinfo.substr(0, colon), core::net::UrlPart::Userinfo);
    auto pass = core::net::url_unescape(
        colon == std::string_view::npos ? std::string_view{} : userinfo.substr(colon + 1),
        core::net::UrlPart::Userinfo);
    if (!user || !pass) return fail("bad percent escape in the proxy URL's user or password");
    p.has_credentials = true;
    p.username = std::move(*user);
    p.password = std::move(*pass);
  }
  std::string port;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) return fail("unclosed '[' in the proxy host");
    p.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') {
      return fail("unexpected \"" + std::string(after) + "\" after the proxy's IPv6 address");
    }
    if (!after.empty()) port = std::string(after.substr(1));
    in6_addr a6{};
    if (inet_pton(AF_INET6, p.host.c_str(), &a6) != 1) {
      return fail("\"" + p.host + "\" in brackets is not an IPv6 address");
    }
  } else {
    auto colon = authority.find(':');
    if (colon != std::string_view::npos && authority.find(':', colon + 1) != std::string::npos) {
      return fail("an IPv6 proxy address needs brackets: http://[addr]:port");
    }
    p.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = std::string(authority.substr(colon + 1));
  }
  if (p.host.empty()) return fail("the proxy URL has no host");
  if (p.host.find_first_of(" %\t\r\n") != std::string::npos) {
    return fail("\"" + p.host + "\" is not a host name or address");
  }
  if (!port.empty()) {
    int n = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), n);
    if (ec != std::errc() || ptr != port.data() + port.size() || n < 1 || n > 65535) {
      return fail("proxy port " + core::config::range_error_text(port, 1, 65535));
    }
    p.port = n;
  }
  return p;
}

NoProxyList::NoProxyList(std::string_view list) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    std::string p = lower(trim(list.substr(start, comma - start)));
    start = comma + 1;
    if (p.empty()) continue;
    if (p == "*") {
      all_ = true;
      entries_.clear();
      return;
    }
    Entry e;
    // IP/prefix (Go's ParseCIDR).
    if (auto slash = p.find('/'); slash != std::string::npos) {
      auto ip = parse_ip(p.substr(0, slash));
      std::string bits = p.substr(slash + 1);
      int n = -1;
      auto [ptr, ec] = std::from_chars(bits.data(), bits.data() + bits.size(), n);
      bool is_v4_text = p.substr(0, slash).find(':') == std::string::npos;
      if (ip && !bits.empty() && ec == std::errc() && ptr == bits.data() + bits.size() && n >= 0 &&
          n <= (is_v4_text ? 32 : 128)) {
        e.kind = Entry::Kind::Cidr;
        e.v4 = ip->v4;
        std::memcpy(e.addr, ip->bytes, 16);
        // An IPv4 network written in IPv6 form (::ffff:10.0.0.0/104) is an IPv4 network, as in
        // Go, whose mask keeps its last 32 bits.
        e.prefix_bits = (ip->v4 && !is_v4_text) ? std::max(0, n - 96) : n;
        entries_.push_back(std::move(e));
        continue;
      }
    }
    std::string host;
    std::string port;
    if (split_host_port(p, &host, &port)) {
      if (host.empty()) continue;  // ":80": no host, ignored as Go does
      e.port = port;
    } else {
      host = p;
    }
    if (auto ip = parse_ip(host)) {
      e.kind = Entry::Kind::Ip;
      e.v4 = ip->v4;
      std::memcpy(e.addr, ip->bytes, 16);
      entries_.push_back(std::move(e));
      continue;
    }
    if (host.rfind("*.", 0) == 0) host.erase(0, 1);
    if (host.front() != '.') {
      e.match_host = true;
      host.insert(0, ".");
    }
    e.kind = Entry::Kind::Domain;
    e.domain = std::move(host);
    entries_.push_back(std::move(e));
  }
}

bool NoProxyList::matches(std::string_view host_in, int port) const {
  if (all_) return true;
  std::string host = lower(trim(host_in));
  std::string port_text = std::to_string(port);
  auto ip = parse_ip(host);
  for (const auto& e : entries_) {
    bool port_ok = e.port.empty() || e.port == port_text;
    switch (e.kind) {
      case Entry::Kind::Ip:
        if (ip && ip->v4 == e.v4 && std::memcmp(ip->bytes, e.addr, e.v4 ? 4 : 16) == 0 && port_ok) {
          return true;
        }
        break;
      case Entry::Kind::Cidr:
        // Go's IPNet.Contains ignores ports; families must agree (IPv4-mapped counts as IPv4).
        if (ip && ip->v4 == e.v4 && prefix_equal(ip->bytes, e.addr, e.prefix_bits)) return true;
        break;
      case Entry::Kind::Domain: {
        bool suffix = host.size() >= e.domain.size() &&
                      host.compare(host.size() - e.domain.size(), e.domain.size(), e.domain) == 0;
        bool exact = e.match_host && host == std::string_view(e.domain).substr(1);
        if ((suffix || exact) && port_ok) return true;
        break;
      }
    }
  }
  return false;
}

ProxyEnvironment ProxyEnvironment::from_process() {
  ProxyEnvironment env;
  for (const char* name : {"HTTPS_PROXY", "https_proxy"}) {
    if (const char* v = getenv_nonempty(name)) {
      env.https_proxy = v;
      env.https_proxy_name = name;
      break;
    }
  }
  for (const char* name : {"NO_PROXY", "no_proxy"}) {
    if (const char* v = getenv_nonempty(name)) {
      env.no_proxy = v;
      break;
    }
  }
  return env;
}

std::optional<EgressProxyConfig> EgressProxyConfig::resolve(const std::string& proxy_url_flag,
                                                            const ProxyEnvironment& env,
                                                            std::string* error) {
  EgressProxyConfig c;
  std::string why;
  if (!proxy_url_flag.empty()) {
    c.proxy_ = parse_proxy_url(proxy_url_flag, &why);
    if (!c.proxy_) {
      *error = "--proxy-url: " + why;
      return std::nullopt;
    }
    c.proxy_->source = "--proxy-url";
    c.from_flag_ = true;
    return c;
  }
  if (env.https_proxy.empty()) return c;
  c.proxy_ = parse_proxy_url(env.https_proxy, &why);
  if (!c.proxy_) {
    *error = "$" + env.https_proxy_name + ": " + why;
    return std::nullopt;
  }
  c.proxy_->source = env.https_proxy_name;
  c.no_proxy_ = env.no_proxy;
  return c;
}

std::optional<EgressProxy> EgressProxyConfig::proxy_for(std::string_view host, int port) const {
  if (!proxy_) return std::nullopt;
  if (from_flag_) return proxy_;  // an explicit proxy takes every server, loopback too
  // Go's httpproxy: never localhost or a loopback address, then NO_PROXY.
  if (host == "localhost") return std::nullopt;
  if (auto ip = parse_ip(trim(host)); ip && is_loopback(*ip)) return std::nullopt;
  if (NoProxyList(no_proxy_).matches(host, port)) return std::nullopt;
  return proxy_;
}

std::string EgressProxyConfig::describe() const {
  if (!proxy_) return "none";
  std::string s = proxy_->redacted() + " (from " + proxy_->source;
  if (!from_flag_) {
    s += no_proxy_.empty() ? ", no NO_PROXY" : ", NO_PROXY=" + no_proxy_;
    s += "; never for localhost and loopback";
  }
  return s + ")";
}

ProxyFailure ProxyFailure::for_status(const EgressProxy& proxy, int status) {
  const std::string code = std::to_string(status);
  // 407 is the standard answer; tinyproxy (1.11) answers 401 to wrong proxy credentials.
  if (status == 407 || status == 401) {
    const std::string words =
        status == 407 ? "407 Proxy Authentication Required" : "HTTP 401 Unauthorized";
    return {Auth, proxy.has_credentials ? "the proxy refused the user and password (" + words + ")"
                                        : "the proxy requires a user and password (" + words + ")"};
  }
  if (status == 502 || status == 503 || status == 504) {
    return {ServerUnreachable, "the proxy could not reach the proxy-server (HTTP " + code + ")"};
  }
  return {Refused, "the proxy refused the CONNECT (HTTP " + code + ")"};
}

ProxyFailure ProxyFailure::unreachable(bool unresolvable) {
  return {ProxyUnreachable,
          unresolvable ? "the proxy's name does not resolve" : "the proxy is unreachable"};
}

ProxyFailure ProxyFailure::timed_out(const std::string& timeout) {
  return {Timeout, "no tunnel within --server-connect-timeout (" + timeout +
                       "): the proxy did not answer the CONNECT, or the server did not finish TLS"};
}

}  // namespace konn::agent
