#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace konn::core::net {

// A "host:port" pair as Go's net.SplitHostPort reads it: IPv6 hosts in brackets ("[::1]:443").
struct HostPort {
  std::string host;  // without brackets
  uint16_t port = 0;

  // Joins back, bracketing IPv6 literals.
  std::string to_string() const;
};

// nullopt when the port is missing, not a number, or out of range.
std::optional<HostPort> parse_host_port(std::string_view text);

}  // namespace konn::core::net
