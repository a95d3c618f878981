#include "proxy-agent/node_listener.h"

#include <algorithm>

#include "core/log/log_macros.h"
#include "core/log/rate_limit.h"
#include "core/net/listener.h"

namespace konn::agent {
namespace {

using core::io::use_nothrow;

spdlog::logger& listener_logger() {
  static const auto log = core::log::get("node.listener");
  return *log;
}

}  // namespace

NodeListener::NodeListener(const AgentOptions& options, asio::io_context& ctx,
                           core::io::WorkerPool& pool, std::shared_ptr<ServerSet> servers,
                           std::shared_ptr<AgentStats> stats)
    : options_(options),
      ctx_(ctx),
      pool_(pool),
      servers_(std::move(servers)),
      stats_(std::move(stats)) {}

void NodeListener::start() {
  for (const auto& text : options_.node_to_control_plane_listen) {
    std::string error;
    auto parsed = parse_node_listen(text, &error);
    if (!parsed) throw std::runtime_error("--node-to-control-plane-listen: " + error);
    auto l = std::make_shared<Listener>(Listener{
        core::net::listen_tcp(ctx_, parsed->listen.host, parsed->listen.port),
        parsed->destination, text});
    ports_.push_back(l->acceptor.local_endpoint().port());
    KONN_LOG((&listener_logger()), info, "node to control plane: listening on {} (port {}), towards {}",
             parsed->listen.to_string(), ports_.back(),
             parsed->destination.empty() ? std::string("the server's first destination")
                                         : parsed->destination);
    listeners_.push_back(l);
  }
  for (auto& l : listeners_) {
    asio::co_spawn(ctx_, accept_loop(l), asio::detached);
  }
}

void NodeListener::stop() {
  asio::post(ctx_, [self = shared_from_this()] {
    for (auto& l : self->listeners_) {
      std::error_code ignored;
      if (l->acceptor.is_open()) {
        KONN_LOG((&listener_logger()), info, "node to control plane: no longer accepting on {}",
                 l->address);
      }
      l->acceptor.close(ignored);
    }
  });
}

void NodeListener::refuse(asio::ip::tcp::socket& s, const std::string& why, size_t limit_slot) {
  // One rate limit per reason: refusals for want of a server (while the agent connects) must not
  // hide the first refusal for a limit that follows within the second, nor the other way round.
  static core::log::RateLimit limits[AgentStats::kLimits + 1];
  core::log::RateLimit& limit = limits[std::min<size_t>(limit_slot, AgentStats::kLimits)];
  if (limit_slot < AgentStats::kLimits) {
    stats_->limits_hit[limit_slot].fetch_add(1, std::memory_order_relaxed);
  } else {
    stats_->no_server_refusals.fetch_add(1, std::memory_order_relaxed);
  }
  std::error_code ec;
  auto peer = s.remote_endpoint(ec);
  if (uint64_t held = 0; limit.allow(&held)) {
    KONN_LOG((&listener_logger()), warn, "node to control plane: connection from {} closed: {}{}",
             ec ? std::string("?") : peer.address().to_string() + ":" + std::to_string(peer.port()),
             why, held > 0 ? " (and " + std::to_string(held) + " more)" : std::string());
  }
  s.close(ec);
}

core::io::Awaitable<void> NodeListener::accept_loop(std::shared_ptr<Listener> l) {
  auto self = shared_from_this();
  while (l->acceptor.is_open()) {
    auto place = pool_.place();
    auto [ec, accepted] = co_await l->acceptor.async_accept(place.ctx, use_nothrow);
    if (ec) {
      if (ec == asio::error::operation_aborted || !l->acceptor.is_open()) co_return;
      KONN_LOG((&listener_logger()), warn, "node to control plane: accept on {} failed: {}", l->address,
               ec.message());
      if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space) {
        asio::steady_timer pause(ctx_, std::chrono::milliseconds(100));
        co_await pause.async_wait(use_nothrow);
      }
      continue;
    }
    asio::ip::tcp::socket socket(std::move(accepted));
    std::error_code ignored;
    socket.set_option(asio::ip::tcp::no_delay(true), ignored);
    int64_t max = options_.max_node_to_control_plane_connections;
    if (max > 0 && stats_->endpoint_slots.load(std::memory_order_relaxed) >= max) {
      refuse(socket,
             std::to_string(max) +
                 " node-to-control-plane connections open "
                 "(--max-node-to-control-plane-connections)",
             AgentStats::LimitEndpointConnections);
      continue;
    }
    auto stream = servers_->pick_node_stream();
    if (!stream) {
      refuse(socket, "no proxy-server connected that confirmed node to control plane",
             AgentStats::kLimits);
      continue;
    }
    stream->open_node_tunnel(std::move(socket), l->destination, place.ctx,
                             std::move(place.lease));
  }
}

}  // namespace konn::agent
