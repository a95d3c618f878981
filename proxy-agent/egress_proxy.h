#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace konn::agent {

// One HTTP proxy the agent reaches the proxy-servers through (`CONNECT host:port`, then TLS and
// HTTP/2 inside the tunnel). Only plain http:// proxies: the CONNECT itself is not encrypted.
struct EgressProxy {
  std::string host;  // name or address, IPv6 without brackets
  int port = 80;     // a URL without a port means 80, as Go's net/http does
  bool has_credentials = false;
  std::string username;  // percent-decoded
  std::string password;  // percent-decoded; never logged
  std::string source;    // where it came from: "--proxy-url", "HTTPS_PROXY", ...

  // host:port, IPv6 in brackets.
  std::string address() const;
  // The URL for logs: http://user@host:port, never the password.
  std::string redacted() const;
  // The Proxy-Authorization value ("Basic base64(user:password)"); empty without credentials.
  std::string authorization() const;
};

// Parses a proxy URL as Go's httpproxy does before it uses one: `[http://][user[:password]@]host
// [:port][/]`; a value without a scheme gets http:// (so `proxy:3128` works). Userinfo is split
// at the last '@' and percent-decoded. Refused, with a message in *error: a scheme other than
// http (https:// and socks5:// proxies are not supported), an empty host, a port that is not
// 1-65535, a bad percent escape, a path, query or fragment.
std::optional<EgressProxy> parse_proxy_url(std::string_view url, std::string* error);

// A NO_PROXY list with the semantics of golang.org/x/net/http/httpproxy: comma-separated,
// case-insensitive entries; `*` bypasses the proxy for every host; an IP or CIDR matches
// addresses (IPv4-mapped IPv6 as IPv4); `example.com` matches that host and its subdomains,
// `.example.com` and `*.example.com` only subdomains; any entry may end in `:port` (IPv6 in
// brackets) to match only that port. Domain entries are compared as strings, also against hosts
// that are IP addresses.
class NoProxyList {
 public:
  explicit NoProxyList(std::string_view list);
  // True when `host` (name or address, IPv6 without brackets) at `port` is listed.
  bool matches(std::string_view host, int port) const;

 private:
  struct Entry {
    enum class Kind { Ip, Cidr, Domain } kind = Kind::Domain;
    bool v4 = false;              // Ip and Cidr: an IPv4 entry (matches IPv4 and IPv4-mapped)
    unsigned char addr[16] = {};  // Ip and Cidr: 4 bytes for IPv4, else 16
    int prefix_bits = 128;        // Cidr
    std::string domain;           // Domain: ".example.com"
    bool match_host = false;      // Domain: also the host itself ("example.com" entries)
    std::string port;             // empty: any port
  };
  bool all_ = false;
  std::vector<Entry> entries_;
};

// The environment variables Go consults for an https:// target, each with its winning name.
struct ProxyEnvironment {
  std::string https_proxy;  // HTTPS_PROXY, else https_proxy
  std::string https_proxy_name;
  std::string no_proxy;  // NO_PROXY, else no_proxy
  // Reads the process environment (an empty variable counts as unset, as in Go).
  static ProxyEnvironment from_process();
};

// How the agent reaches its proxy-servers: through --proxy-url for every server, or, when the
// flag is absent, as a Go program does for an https:// URL: HTTPS_PROXY unless NO_PROXY lists
// the server; `localhost` and loopback addresses are never proxied through the environment.
class EgressProxyConfig {
 public:
  // Empty config: every server directly.
  EgressProxyConfig() = default;
  // From the flag (when not empty) or the environment. nullopt with a message naming the flag or
  // variable when the URL is refused.
  static std::optional<EgressProxyConfig> resolve(const std::string& proxy_url_flag,
                                                  const ProxyEnvironment& env, std::string* error);

  // The proxy for the server at host:port, or nullopt for a direct connection.
  std::optional<EgressProxy> proxy_for(std::string_view host, int port) const;
  // A line for the start-up log: "none", "http://proxy:3128 (from --proxy-url)", ...
  std::string describe() const;

 private:
  std::optional<EgressProxy> proxy_;
  bool from_flag_ = false;
  std::string no_proxy_;
};

// What went wrong with an attempt through a proxy (konn_agent_egress_proxy_failures_total{reason}).
struct ProxyFailure {
  enum Reason {
    Auth,               // 407 (or tinyproxy's 401): credentials missing or refused
    Refused,            // any other status: the proxy's rules refused the CONNECT
    ServerUnreachable,  // 502/503/504: the proxy could not reach the proxy-server
    ProxyUnreachable,   // the proxy's address refused, unreachable or unresolvable
    Timeout,            // no tunnel within --server-connect-timeout
    Other,              // anything else (TLS, the server's answer): gRPC's reason alone
    kReasons
  };
  static constexpr std::array<const char*, kReasons> kReasonNames{
      "auth", "refused", "server_unreachable", "proxy_unreachable", "timeout", "other"};
  Reason reason = Other;
  std::string text;  // plain words for the log; may be empty for Other

  // The proxy answered the CONNECT with `status` (not 2xx): 407 (or tinyproxy's 401) is Auth,
  // worded by whether `proxy` sent credentials; 502/503/504 ServerUnreachable; any other Refused.
  static ProxyFailure for_status(const EgressProxy& proxy, int status);
  // The proxy's address refused the connection or is unreachable; `unresolvable`: its name does
  // not resolve.
  static ProxyFailure unreachable(bool unresolvable);
  // No tunnel within --server-connect-timeout (`timeout` as the flag reads, e.g. "20s").
  static ProxyFailure timed_out(const std::string& timeout);
};

}  // namespace konn::agent
