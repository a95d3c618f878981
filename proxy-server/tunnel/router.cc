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

Router::Router(const ServerOptions& options, asio::io_context& timers, ServerMetrics& metrics)
    : options_(options), backends_(strategies_of(options)), timers_(timers), metrics_(metrics) {
  pending_.set_gauge(&metrics_.pending);
  for (auto s : strategies_of(options)) metrics_.set_ready(to_string(s), 0);
}

void Router::add_backend(const std::shared_ptr<Backend>& backend) {
  backends_.add(backend);
  update_ready_gauges();
}

void Router::remove_backend(const Backend* backend) {
  backends_.remove(backend);
  update_ready_gauges();
}

void Router::update_ready_gauges() {
  for (auto s : strategies_of(options_)) {
    metrics_.set_ready(to_string(s), static_cast<double>(backends_.usable_by(s)));
  }
  metrics_.ready_backend_connections.Add({}).Set(static_cast<double>(backends_.agent_count()));
}

}  // namespace konn::server
