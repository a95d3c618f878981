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

std::optional<size_t> select_backend(const std::vector<Candidate>& candidates,
                                     const std::vector<ProxyStrategy>& strategies,
                                     std::string_view dest_host, std::mt19937_64& rng) {
  std::vector<size_t> ready;
  std::vector<size_t> draining;
  for (auto strategy : strategies) {
    ready.clear();
    draining.clear();
    for (size_t i = 0; i < candidates.size(); ++i) {
      const auto& c = candidates[i];
      bool match = false;
      switch (strategy) {
        case ProxyStrategy::Default:
          match = true;
          break;
        case ProxyStrategy::DestHost:
          match = c.identifiers != nullptr && c.identifiers->serves_host(dest_host);
          break;
        case ProxyStrategy::DefaultRoute:
          match = c.identifiers != nullptr && c.identifiers->default_route;
          break;
      }
      if (match) (c.draining ? draining : ready).push_back(i);
    }
    const auto& pool = ready.empty() ? draining : ready;
    if (!pool.empty()) {
      std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
      return pool[pick(rng)];
    }
  }
  return std::nullopt;
}

}  // namespace konn::server
