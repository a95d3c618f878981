#include "proxy-agent/server_set.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include <asio/steady_timer.hpp>

#include "core/config/duration.h"
#include "core/log/log_macros.h"
#include "proxy-agent/backoff.h"
#include "proxy-agent/server_connector.h"

namespace konn::agent {
namespace {

using core::io::use_nothrow;
namespace h2 = core::h2;

spdlog::logger& servers_logger() {
  static const auto log = core::log::get("agent.servers");
  return *log;
}

// Upstream waits for the response headers without a bound; a server that accepts TCP and then
// says nothing would stall the loop for good. This bounds one attempt.
constexpr std::chrono::seconds kHandshakeTimeout{30};
// Go servers answer faster keepalive pings with GOAWAY (enforcement MinTime 30 s).
constexpr std::chrono::seconds kMinKeepalive{30};

}  // namespace

struct ServerSet::Attempt {
  explicit Attempt(asio::io_context& ctx) : timer(ctx) {}
  asio::steady_timer timer;  // ctx only; cancelled when the outcome is known
  bool done = false;         // ctx only
  Outcome outcome = Outcome::Failed;
  std::string why;
};

ServerSet::ServerSet(const AgentOptions& options, core::io::WorkerPool& pool, asio::io_context& ctx,
                     std::shared_ptr<AgentStats> stats, std::shared_ptr<AgentStats> node_stats)
    : options_(options),
      pool_(pool),
      ctx_(ctx),
      stats_(std::move(stats)),
      node_stats_(std::move(node_stats)),
      egress_(options.egress_proxy()) {
  std::string error;
  auto policy = core::net::DestinationPolicy::parse(options_.allowed_destinations, &error);
  if (!policy) {
    // validate() refuses such options before we get here; never fall open.
    KONN_LOG((&servers_logger()), err, "--allowed-destinations: {}; using the default rules", error);
    policy =
        core::net::DestinationPolicy::parse(core::net::DestinationPolicy::default_rules(), &error);
  }
  destinations_ = std::make_shared<const core::net::DestinationPolicy>(std::move(*policy));
}

ServerSet::~ServerSet() = default;

void ServerSet::start() {
  asio::co_spawn(ctx_, connect_loop(), asio::detached);
  asio::co_spawn(ctx_, probe_loop(), asio::detached);
}

void ServerSet::drain() {
  std::vector<std::shared_ptr<ServerStreamReactor>> streams;
  {
    std::lock_guard lock(mu_);
    if (draining_) return;
    draining_ = true;
    for (auto& [id, s] : streams_) streams.push_back(s);
  }
  KONN_LOG((&servers_logger()), info, "draining: no new server connections; DRAIN to {} server(s)",
           streams.size());
  for (auto& s : streams) s->drain();
}

bool ServerSet::stop(bool abort, std::chrono::milliseconds wait) {
  std::vector<std::shared_ptr<ServerStreamReactor>> streams;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& [id, s] : streams_) streams.push_back(s);
    if (pending_) streams.push_back(pending_);
  }
  asio::post(ctx_, [self = shared_from_this()] {
    if (self->loop_timer_) self->loop_timer_->cancel();
    if (self->probe_timer_) self->probe_timer_->cancel();
  });
  for (auto& s : streams) {
    s->close(abort ? h2::GrpcStatus{h2::grpc_code::kCancelled, "agent stopping"} : h2::GrpcStatus{},
             abort);
  }
  std::unique_lock lock(mu_);
  return all_done_.wait_for(lock, wait, [this] { return live_ == 0; });
}

size_t ServerSet::connected() const {
  std::lock_guard lock(mu_);
  return streams_.size();
}

std::vector<std::string> ServerSet::server_ids() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> ids;
  for (auto& [id, s] : streams_) ids.push_back(id);
  return ids;
}

size_t ServerSet::endpoint_connections() const {
  std::vector<std::shared_ptr<ServerStreamReactor>> streams;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, s] : streams_) streams.push_back(s);
  }
  size_t n = 0;
  for (auto& s : streams) n += s->connection_count();
  return n;
}

void ServerSet::note_locked(const std::string& key, const std::string& target,
                            const std::string& server_id, const std::string& what, bool error) {
  auto now = std::chrono::system_clock::now();
  if (events_.size() == kEventsKept) events_.pop_front();
  events_.push_back({now, target, server_id, what});
  if (error) last_errors_[key] = {target, server_id, what, now};
}

ServerSet::Status ServerSet::status() const {
  Status out;
  std::vector<std::shared_ptr<ServerStreamReactor>> streams;
  {
    std::lock_guard lock(mu_);
    out.draining = draining_;
    out.server_count = target_count_locked();
    out.recent.assign(events_.begin(), events_.end());
    for (const auto& [id, stream] : streams_) {
      ServerRow row;
      row.server_id = id;
      row.target = stream->target();
      row.connected = true;
      if (auto it = since_.find(id); it != since_.end()) row.since = it->second;
      if (auto it = last_errors_.find(id); it != last_errors_.end()) {
        row.last_error = it->second.error;
        row.last_error_at = it->second.at;
      }
      out.servers.push_back(std::move(row));
      streams.push_back(stream);
    }
    for (const auto& [key, e] : last_errors_) {
      if (streams_.count(key) != 0) continue;
      ServerRow row;
      row.server_id = e.server_id;
      row.target = e.target;
      row.last_error = e.error;
      row.last_error_at = e.at;
      out.servers.push_back(std::move(row));
    }
  }
  // Outside the lock: the reactors' tables have their own.
  for (size_t i = 0; i < streams.size(); ++i) {
    out.servers[i].tunnels = streams[i]->connection_count();
    out.servers[i].node_tunnels = streams[i]->node_connection_count();
    out.servers[i].flow_control = streams[i]->flow_control();
    for (const auto& conn : streams[i]->connections()) {
      out.tunnels.push_back({out.servers[i].server_id, conn->status()});
    }
  }
  return out;
}

int64_t ServerSet::server_count() const {
  std::lock_guard lock(mu_);
  return target_count_locked();
}

int64_t ServerSet::target_count_locked() const {
  if (!lease_count_) return server_count_;
  int64_t n = options_.server_count_source == "max" ? std::max(*lease_count_, server_count_)
                                                    : *lease_count_;
  return std::max<int64_t>(1, n);
}

void ServerSet::set_lease_count(int64_t count) {
  int64_t before = 0;
  int64_t after = 0;
  {
    std::lock_guard lock(mu_);
    before = target_count_locked();
    lease_count_ = count;
    after = target_count_locked();
  }
  stats_->known_server_count.store(after, std::memory_order_relaxed);
  if (before != after) {
    KONN_LOG((&servers_logger()), info, "server count {} -> {} ({} valid lease(s), source {})", before,
             after, count, options_.server_count_source);
  }
}

bool ServerSet::want_more() const {
  std::lock_guard lock(mu_);
  if (draining_ || stopping_) return false;
  // A count of 0 or less (a server run with --server-count=0) means unknown: keep connecting to
  // find servers, as upstream's agent does.
  const int64_t target = target_count_locked();
  return options_.sync_forever || target <= 0 || static_cast<int64_t>(streams_.size()) < target;
}

core::io::Awaitable<void> ServerSet::connect_loop() {
  auto self = shared_from_this();
  Backoff backoff(options_.sync_interval, options_.sync_interval_cap);
  loop_timer_ = std::make_shared<asio::steady_timer>(ctx_);
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
    }
    auto wait = backoff.jittered(options_.sync_interval);
    if (want_more()) {
      Outcome outcome = co_await connect_once();
      if (outcome == Outcome::Failed) {
        wait = backoff.next();
      } else {
        backoff.reset();
      }
    }
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
    }
    loop_timer_->expires_after(wait);
    co_await loop_timer_->async_wait(use_nothrow);
  }
}

core::io::Awaitable<void> ServerSet::probe_loop() {
  auto self = shared_from_this();
  probe_timer_ = std::make_shared<asio::steady_timer>(ctx_);
  while (true) {
    probe_timer_->expires_after(options_.probe_interval);
    co_await probe_timer_->async_wait(use_nothrow);
    std::vector<std::shared_ptr<ServerStreamReactor>> streams;
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
      for (auto& [id, s] : streams_) streams.push_back(s);
    }
    for (auto& s : streams) {
      if (s->connection_lost()) {
        KONN_LOG((&servers_logger()), warn, "server {} at {}: connection not ready, dropping it",
                 s->server_id(), s->target());
        s->close({h2::grpc_code::kUnavailable, "probe: connection not ready"}, true);
      }
    }
  }
}

bool ServerSet::prepare_attempt(StreamConfig* config) {
  const std::string& host =
      options_.proxy_server_hosts[next_host_++ % options_.proxy_server_hosts.size()];
  std::string_view bare = host;
  if (bare.size() > 2 && bare.front() == '[' && bare.back() == ']') {
    bare = bare.substr(1, bare.size() - 2);
  }
  config->server.host = std::string(bare);
  config->server.port = options_.proxy_server_port;
  config->server.proxy = egress_.proxy_for(bare, options_.proxy_server_port);
  config->server.timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.server_connect_timeout);
  config->target = config->server.address();
  config->agent_id = options_.agent_id;
  config->agent_identifiers = options_.agent_identifiers;
  config->endpoint.dial_timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.dial_timeout);
  config->endpoint.destinations = destinations_;
  config->endpoint.half_close_timeout = options_.half_close_timeout;
  config->max_endpoint_connections = options_.max_endpoint_connections;
  if (!options_.node_to_control_plane_listen.empty() && node_stats_) {
    config->node_to_control_plane = true;
    config->node_stats = node_stats_;
    // Both ends are konn: credit and half-close always hold on node tunnels.
    config->node_endpoint.node_direction = true;
    config->node_endpoint.flow_control = true;
    config->node_endpoint.half_close = true;
    config->node_endpoint.half_close_timeout = options_.half_close_timeout;
  }

  // Read at every connect, so a rotated token is picked up.
  if (!options_.service_account_token_path.empty()) {
    std::ifstream in(options_.service_account_token_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in) {
      KONN_LOG((&servers_logger()), warn, "cannot read --service-account-token-path {}",
               options_.service_account_token_path);
      return false;
    }
    config->token = ss.str();
    // A header value cannot carry control characters, so unlike upstream (raw contents) a
    // trailing newline is trimmed and anything else refused.
    while (!config->token.empty() &&
           std::isspace(static_cast<unsigned char>(config->token.back())) != 0) {
      config->token.pop_back();
    }
    bool printable = std::all_of(config->token.begin(), config->token.end(),
                                 [](char c) { return c >= 0x20 && c <= 0x7e; });
    if (!printable) {
      KONN_LOG((&servers_logger()), warn, "token in {} has characters a header cannot carry",
               options_.service_account_token_path);
      return false;
    }
  }

  // Read at every connect, so rotated certificates are picked up.
  try {
    config->server.tls =
        make_server_client_context(options_.ca_cert, options_.agent_cert, options_.agent_key);
    config->server.alpn = options_.alpn_offered();
  } catch (const std::exception& e) {
    KONN_LOG((&servers_logger()), warn, "TLS credentials: {}", e.what());
    return false;
  }
  config->keepalive = std::max<std::chrono::milliseconds>(
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.keepalive_time),
      kMinKeepalive);
  return true;
}

core::io::Awaitable<ServerSet::Outcome> ServerSet::connect_once() {
  StreamConfig config;
  if (!prepare_attempt(&config)) {
    stats_->server_connect_failures.fetch_add(1, std::memory_order_relaxed);
    co_return Outcome::Failed;
  }
  const std::optional<EgressProxy> proxy = config.server.proxy;
  auto attempt = std::make_shared<Attempt>(ctx_);
  // The callbacks run on the stream's home worker and may outlive this attempt: they hold weak
  // references only, so nothing with an Asio timer is ever destroyed there.
  std::weak_ptr<ServerSet> weak = weak_from_this();
  std::weak_ptr<Attempt> weak_attempt = attempt;
  auto reactor = ServerStreamReactor::create(
      pool_.place(), std::move(config), pool_, stats_,
      [weak, weak_attempt](const std::shared_ptr<ServerStreamReactor>& r, const Handshake& h) {
        auto set = weak.lock();
        return set && set->on_handshake(r, h, weak_attempt);
      },
      [weak, weak_attempt](std::shared_ptr<ServerStreamReactor> r, bool failed,
                           const std::string& why) {
        if (auto set = weak.lock()) set->on_end(std::move(r), failed, why, weak_attempt);
      });
  bool stopping = false;
  {
    std::lock_guard lock(mu_);
    stopping = stopping_;
    if (!stopping) ++live_;
  }
  if (stopping) co_return Outcome::Failed;
  // Started before it is published as pending_: stop() may close pending_ at once from another
  // thread.
  reactor->start();
  {
    std::lock_guard lock(mu_);
    stopping = stopping_;
    if (!stopping) pending_ = reactor;
  }
  if (stopping) reactor->close({h2::grpc_code::kCancelled, "agent stopping"}, true);
  // Bounds the whole attempt (connection, then the server's response headers); never shorter
  // than the connection's own bound (--server-connect-timeout) plus 10 s.
  attempt->timer.expires_after(std::max<std::chrono::steady_clock::duration>(
      kHandshakeTimeout, options_.server_connect_timeout + std::chrono::seconds(10)));
  co_await attempt->timer.async_wait(use_nothrow);
  if (!attempt->done) {
    reactor->close({h2::grpc_code::kDeadlineExceeded, "no response headers"}, true);
    while (!attempt->done) {
      attempt->timer.expires_after(std::chrono::seconds(60));
      co_await attempt->timer.async_wait(use_nothrow);
    }
  }
  {
    std::lock_guard lock(mu_);
    pending_.reset();
  }
  switch (attempt->outcome) {
    case Outcome::Connected:
      break;
    case Outcome::Duplicate:
      KONN_LOG((&servers_logger()), debug, "{}: {}", reactor->target(), attempt->why);
      break;
    case Outcome::Failed:
      stats_->server_connect_failures.fetch_add(1, std::memory_order_relaxed);
      {
        std::lock_guard lock(mu_);
        note_locked(reactor->target(), reactor->target(), {},
                    "connection attempt failed: " + attempt->why, true);
      }
      if (proxy) {
        // The connector classifies every failure through a proxy; one past the connection (the
        // server's answer) is Other.
        auto failure = reactor->proxy_failure().value_or(ProxyFailure{ProxyFailure::Other, {}});
        stats_->egress_proxy_failures[failure.reason].fetch_add(1, std::memory_order_relaxed);
        KONN_LOG((&servers_logger()), warn,
                 "cannot connect to proxy-server {} through HTTP proxy {} (from {}): {}{}",
                 reactor->target(), proxy->redacted(), proxy->source,
                 failure.text.empty() ? "" : failure.text + "; ", attempt->why);
      } else {
        KONN_LOG((&servers_logger()), warn, "cannot connect to proxy-server {}: {}", reactor->target(),
                 attempt->why);
      }
      break;
  }
  co_return attempt->outcome;
}

bool ServerSet::on_handshake(const std::shared_ptr<ServerStreamReactor>& s, const Handshake& h,
                             const std::weak_ptr<Attempt>& attempt) {
  Outcome outcome = Outcome::Connected;
  std::string why;
  int64_t target = 1;
  bool drain_it = false;
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      outcome = Outcome::Duplicate;
      why = "agent is shutting down";
    } else if (streams_.count(h.server_id) != 0) {
      outcome = Outcome::Duplicate;
      why = "already connected to server " + h.server_id;
    } else {
      streams_[h.server_id] = s;
      since_[h.server_id] = std::chrono::system_clock::now();
      note_locked(h.server_id, s->target(), h.server_id, "connected", false);
      // Only a new distinct server updates the count (as upstream does since #774). 0 or less
      // is kept: the count is unknown (want_more).
      server_count_ = h.server_count;
      // An attempt under way when the drain began: the stream is kept, as upstream keeps it,
      // and told at once. drain() sent DRAIN to the streams registered before it.
      drain_it = draining_;
    }
    target = target_count_locked();
  }
  if (drain_it) s->drain();
  if (outcome == Outcome::Connected && !options_.node_to_control_plane_listen.empty() &&
      !h.node_to_control_plane) {
    bool first = false;
    {
      std::lock_guard lock(mu_);
      first = node_refused_.insert(h.server_id).second;
    }
    if (first) {
      KONN_LOG((&servers_logger()), err,
               "server {} at {} did not confirm node to control plane (an upstream server, or "
               "one without --node-to-control-plane-destinations): node-side connections will "
               "not use it; tunnels towards the nodes work as usual",
               h.server_id, s->target());
    }
  }
  if (outcome == Outcome::Connected) {
    stats_->known_server_count.store(target, std::memory_order_relaxed);
    stats_->open_server_connections.fetch_add(1, std::memory_order_relaxed);
  } else {
    stats_->duplicate_servers.fetch_add(1, std::memory_order_relaxed);
  }
  finish_attempt(attempt, outcome, why);
  return outcome == Outcome::Connected;
}

std::shared_ptr<ServerStreamReactor> ServerSet::pick_node_stream() const {
  std::vector<std::shared_ptr<ServerStreamReactor>> streams;
  {
    std::lock_guard lock(mu_);
    if (draining_ || stopping_) return nullptr;
    for (const auto& [id, s] : streams_) streams.push_back(s);
  }
  // Ties go round: the scan starts one server further each time.
  if (!streams.empty()) {
    size_t start = node_turn_.fetch_add(1, std::memory_order_relaxed) % streams.size();
    std::rotate(streams.begin(), streams.begin() + static_cast<std::ptrdiff_t>(start),
                streams.end());
  }
  std::shared_ptr<ServerStreamReactor> best;
  size_t best_load = 0;
  for (auto& s : streams) {
    if (!s->node_ready()) continue;
    size_t load = s->node_connection_count();
    if (!best || load < best_load) {
      best = s;
      best_load = load;
    }
  }
  return best;
}

void ServerSet::close_node_connections(const std::string& why) {
  std::vector<std::shared_ptr<ServerStreamReactor>> streams;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, s] : streams_) streams.push_back(s);
  }
  for (auto& s : streams) s->close_node_connections(why);
}

size_t ServerSet::node_ready_servers() const {
  std::vector<std::shared_ptr<ServerStreamReactor>> streams;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, s] : streams_) streams.push_back(s);
  }
  return static_cast<size_t>(
      std::count_if(streams.begin(), streams.end(), [](const auto& s) { return s->node_ready(); }));
}

void ServerSet::on_end(std::shared_ptr<ServerStreamReactor> s, bool handshake_failed,
                       const std::string& why, const std::weak_ptr<Attempt>& attempt) {
  std::string id = s->server_id();
  std::string target = s->target();
  bool removed = false;
  {
    std::lock_guard lock(mu_);
    if (auto it = streams_.find(id); it != streams_.end() && it->second == s) {
      streams_.erase(it);
      since_.erase(id);
      removed = true;
      note_locked(id, target, id, "stream ended: " + why, true);
    }
  }
  if (removed) {
    stats_->open_server_connections.fetch_sub(1, std::memory_order_relaxed);
    KONN_LOG((&servers_logger()), info, "server {} at {} gone: {}", id, target, why);
  }
  if (handshake_failed) finish_attempt(attempt, Outcome::Failed, why);
  // We may run inside the reactor's own completion: it must die elsewhere. Posted before
  // live_ drops, so ctx_ is still alive (stop() waits for live_ == 0).
  asio::post(ctx_, [dead = std::move(s)] {});
  {
    std::lock_guard lock(mu_);
    --live_;
  }
  all_done_.notify_all();
}

void ServerSet::finish_attempt(const std::weak_ptr<Attempt>& weak, Outcome outcome,
                               const std::string& why) {
  auto attempt = weak.lock();
  if (!attempt) return;
  // The strong reference moves into the handler, so the Attempt dies on ctx_, never here.
  asio::post(ctx_, [attempt = std::move(attempt), outcome, why] {
    if (attempt->done) return;
    attempt->done = true;
    attempt->outcome = outcome;
    attempt->why = why;
    attempt->timer.cancel();
  });
}

}  // namespace konn::agent
