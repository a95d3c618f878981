#include "proxy-server/tunnel/router.h"

namespace konn::server {
namespace {

std::vector<ProxyStrategy> strategies_of(const ServerOptions& o) {
  std::vector<ProxyStrategy> out;
  for (const auto& name : o.proxy_strategies) {
    if (auto s = parse_proxy_strategy(name)) out.push_back(*s);
  }
  return out;
}

}  // namespace

Router::Router(const ServerOptions& options, asio::io_context& timers)
    : options_(options), backends_(strategies_of(options)), timers_(timers) {}

}  // namespace konn::server
