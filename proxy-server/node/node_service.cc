#include "proxy-server/node/node_service.h"

#include <algorithm>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>

#include "core/log/log_macros.h"
#include "core/log/rate_limit.h"
#include "core/tunnel/packet.h"

namespace konn::server {
namespace {

namespace tunnel = core::tunnel;

spdlog::logger& logger() {
  static const auto log = core::log::get("node.server");
  return *log;
}

Packet node_dial_error(int64_t random, const std::string& error) {
  return tunnel::as_node(tunnel::make_dial_response(random, 0, error));
}

}  // namespace

NodeService::NodeService(const ServerOptions& options, core::metrics::Registry& registry)
    : options_(options), pool_(2) {
  settings_.node_direction = true;
  settings_.flow_control = true;  // both ends are konn
  settings_.dial_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      options_.node_to_control_plane_dial_timeout);
  settings_.half_close_timeout = options_.half_close_timeout;

  auto& r = registry.prometheus();
  const core::endpoint::EndpointStats& s = *stats_;
  open_ = &prometheus::BuildGauge()
               .Name("konn_server_node_connections")
               .Help("Open node-to-control-plane tunnels (dialled for agents)")
               .Register(r)
               .Add({});
  auto link = [&](prometheus::Family<prometheus::Counter>& family,
                  const std::map<std::string, std::string>& labels,
                  const std::atomic<uint64_t>& source) {
    counters_.push_back({&source, &family.Add(labels), 0});
  };
  auto& dials = prometheus::BuildCounter()
                    .Name("konn_server_node_dials_total")
                    .Help("Node-to-control-plane dials started for agents")
                    .Register(r);
  link(dials, {}, s.dials);
  auto& failures = prometheus::BuildCounter()
                       .Name("konn_server_node_dial_failures_total")
                       .Help(
                           "Node-to-control-plane dials that opened no tunnel, by reason: "
                           "destination outside --node-to-control-plane-destinations "
                           "(not_allowed), --max-node-to-control-plane-connections (limit), "
                           "timeout, other connect errors (error), cancelled by the agent")
                       .Register(r);
  link(failures, {{"reason", "not_allowed"}},
       s.dials_refused[core::endpoint::EndpointStats::RefusedDestination]);
  link(failures, {{"reason", "limit"}},
       s.limits_hit[core::endpoint::EndpointStats::LimitEndpointConnections]);
  link(failures, {{"reason", "timeout"}}, s.dial_timeouts);
  link(failures, {{"reason", "error"}}, s.dial_failures);
  link(failures, {{"reason", "cancelled"}}, s.dials_cancelled);
  auto& bytes = prometheus::BuildCounter()
                    .Name("konn_server_node_bytes_total")
                    .Help("Node-to-control-plane bytes relayed, by direction")
                    .Register(r);
  link(bytes, {{"direction", "to_destination"}}, s.bytes_to_endpoints);
  link(bytes, {{"direction", "from_destination"}}, s.bytes_from_endpoints);
  auto& closes = prometheus::BuildCounter()
                     .Name("konn_server_node_closes_total")
                     .Help(
                         "Node-to-control-plane tunnels closed by a bound: --half-close-timeout "
                         "(half_close) or a write queue over its cap (queue)")
                     .Register(r);
  link(closes, {{"reason", "half_close"}}, s.half_close_timeouts);
  link(closes, {{"reason", "queue"}}, s.queue_overflow_closes);
}

NodeService::~NodeService() { stop(); }

void NodeService::start() { pool_.start(); }

void NodeService::stop() { pool_.stop(); }

void NodeService::update_metrics() {
  std::lock_guard lock(metrics_mu_);
  open_->Set(static_cast<double>(stats_->open_endpoint_connections.load()));
  for (auto& c : counters_) {
    uint64_t now = c.source->load(std::memory_order_relaxed);
    if (now > c.seen) c.target->Increment(static_cast<double>(now - c.seen));
    c.seen = now;
  }
}

void NodeService::stream_ended(const Table& table) {
  for (auto& c : table->take_all()) c->abandon();
}

void NodeService::handle(Packet&& p, const std::shared_ptr<core::tunnel::PacketStream>& stream,
                         const Table& table, const Agent& agent) {
  switch (p.type()) {
    case DIAL_REQ:
      dial(p.dialrequest(), stream, table, agent);
      return;
    case DATA:
      if (auto c = table->find(p.data().connectid())) {
        c->deliver(std::move(p));
      } else {
        stats_->unknown_connect_ids.fetch_add(1, std::memory_order_relaxed);
        stream->send(tunnel::as_node(
            tunnel::make_close_response(p.data().connectid(), "unrecognized connectID")));
      }
      return;
    case CLOSE_RSP:
      if (auto c = table->find(p.closeresponse().connectid())) {
        c->peer_closed(p.closeresponse().error());
      }
      return;
    case DIAL_CLS:
      if (auto c = table->find_dial(p.closedial().random())) c->cancel_dial();
      return;
    case KONN_WINDOW_UPDATE:
      if (auto c = table->find(p.windowupdate().connectid())) {
        c->add_credit(p.windowupdate().bytes());
      }
      return;
    case KONN_CLOSE_WRITE:
      if (auto c = table->find(p.closewrite().connectid())) c->close_write();
      return;
    default:
      KONN_LOG((&logger()), warn, "[A{}] unexpected node packet from agent ignored: {}",
               agent.agent_id, tunnel::describe(tunnel::as_node(std::move(p))));
      return;
  }
}

void NodeService::dial(const DialRequest& req,
                       const std::shared_ptr<core::tunnel::PacketStream>& stream,
                       const Table& table, const Agent& agent) {
  static core::log::RateLimit refusals;
  const auto& allowed = options_.node_to_control_plane_destinations;
  int64_t random = req.random();
  std::string address = req.address().empty() ? allowed.front() : req.address();
  if (req.protocol() != "tcp" || std::find(allowed.begin(), allowed.end(), address) == allowed.end()) {
    stats_->dials_refused[core::endpoint::EndpointStats::RefusedDestination].fetch_add(
        1, std::memory_order_relaxed);
    if (uint64_t held = 0; refusals.allow(&held)) {
      KONN_LOG((&logger()), warn,
               "[node D{} A{}] dial to {} {} refused: not in --node-to-control-plane-destinations "
               "(agent {} from {}, identifiers \"{}\"){}",
               random, agent.agent_id, req.protocol(), address, agent.agent_id, agent.peer,
               agent.identifiers,
               held > 0 ? " (and " + std::to_string(held) + " more refusals)" : std::string());
    }
    stream->send(node_dial_error(random, "dial " + req.protocol() + " " + address +
                                             ": konn proxy-server: destination not in "
                                             "--node-to-control-plane-destinations"));
    return;
  }
  int64_t max = options_.max_node_to_control_plane_connections;
  if (max > 0 && stats_->endpoint_slots.load(std::memory_order_relaxed) >= max) {
    stats_->limits_hit[core::endpoint::EndpointStats::LimitEndpointConnections].fetch_add(
        1, std::memory_order_relaxed);
    if (uint64_t held = 0; refusals.allow(&held)) {
      KONN_LOG((&logger()), warn,
               "[node D{} A{}] dial to {} refused: {} node-to-control-plane tunnels open "
               "(--max-node-to-control-plane-connections){}",
               random, agent.agent_id, address, max,
               held > 0 ? " (and " + std::to_string(held) + " more refusals)" : std::string());
    }
    stream->send(node_dial_error(random, "dial tcp " + address +
                                             ": konn proxy-server: too many node-to-control-plane "
                                             "tunnels (limit " +
                                             std::to_string(max) +
                                             ", --max-node-to-control-plane-connections)"));
    return;
  }
  core::endpoint::EndpointSettings settings = settings_;
  settings.half_close = req.konnhalfclose();
  int64_t id = table->allocate_connect_id();
  auto place = pool_.place();
  auto conn = std::make_shared<core::endpoint::EndpointConnection>(
      place.ctx, stream, table, id, random, "A" + agent.agent_id, settings, stats_,
      std::move(place.lease));
  if (!table->add_dial(random, conn)) {
    stream->send(node_dial_error(random, "dial tcp " + address + ": dial id already in use"));
    return;
  }
  conn->start(address);
}

}  // namespace konn::server
