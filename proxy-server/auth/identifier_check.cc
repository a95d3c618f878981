#include "proxy-server/auth/identifier_check.h"

#include <algorithm>
#include <cctype>

namespace konn::server {
namespace {

bool same_name(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool has_ip(const core::tls::CertificateNames& cert, const std::string& text) {
  std::error_code ec;
  auto ip = asio::ip::make_address(text, ec);
  return !ec && std::find(cert.ips.begin(), cert.ips.end(), ip) != cert.ips.end();
}

}  // namespace

std::vector<std::string> unproven_identifiers(const core::tunnel::AgentIdentifiers& ids,
                                              const core::tls::CertificateNames& cert,
                                              const std::vector<std::string>& route_agents) {
  std::vector<std::string> out;
  for (const auto& host : ids.hosts) {
    bool proven = std::any_of(cert.dns.begin(), cert.dns.end(),
                              [&](const std::string& d) { return same_name(d, host); });
    if (!proven) out.emplace_back("host=" + host);
  }
  for (const auto& ip : ids.ipv4) {
    if (!has_ip(cert, ip)) out.emplace_back("ipv4=" + ip);
  }
  for (const auto& ip : ids.ipv6) {
    if (!has_ip(cert, ip)) out.emplace_back("ipv6=" + ip);
  }
  if (!ids.cidrs.empty() || ids.default_route) {
    auto listed = [&](const std::string& name) {
      return !name.empty() && std::any_of(route_agents.begin(), route_agents.end(),
                                          [&](const std::string& r) { return same_name(r, name); });
    };
    bool route_agent =
        listed(cert.common_name) || std::any_of(cert.dns.begin(), cert.dns.end(), listed);
    if (!route_agent) {
      for (const auto& c : ids.cidrs) out.emplace_back("cidr=" + c);
      if (ids.default_route) out.emplace_back("default-route=true");
    }
  }
  return out;
}

}  // namespace konn::server
