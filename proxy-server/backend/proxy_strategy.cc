#include "proxy-server/backend/proxy_strategy.h"

namespace konn::server {

std::optional<ProxyStrategy> parse_proxy_strategy(std::string_view name) {
  if (name == "default") return ProxyStrategy::Default;
  if (name == "destHost") return ProxyStrategy::DestHost;
  if (name == "defaultRoute") return ProxyStrategy::DefaultRoute;
  return std::nullopt;
}

std::string to_string(ProxyStrategy s) {
  switch (s) {
    case ProxyStrategy::Default: return "default";
    case ProxyStrategy::DestHost: return "destHost";
    case ProxyStrategy::DefaultRoute: return "defaultRoute";
  }
  return "unknown";
}

std::optional<AgentChoice> parse_agent_choice(std::string_view name) {
  if (name == "least-loaded") return AgentChoice::LeastLoaded;
  if (name == "random") return AgentChoice::Random;
  return std::nullopt;
}

std::string to_string(AgentChoice c) {
  switch (c) {
    case AgentChoice::LeastLoaded: return "least-loaded";
    case AgentChoice::Random: return "random";
  }
  return "unknown";
}

}  // namespace konn::server
