#include "core/net/endpoint.h"

#include <charconv>

namespace konn::core::net {

std::string HostPort::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::optional<HostPort> parse_host_port(std::string_view text) {
  HostPort hp;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return std::nullopt;
    }
    hp.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    hp.host = std::string(text.substr(0, colon));
    if (hp.host.find(':') != std::string::npos) return std::nullopt;  // unbracketed IPv6
    port = text.substr(colon + 1);
  }
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || value > 65535) {
    return std::nullopt;
  }
  hp.port = static_cast<uint16_t>(value);
  return hp;
}

}  // namespace konn::core::net
