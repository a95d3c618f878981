#include "proxy-server/backend/backend.h"

#include "core/log/log_macros.h"
#include "core/tls/certificate_names.h"
#include "core/tunnel/packet.h"
#include "proxy-server/auth/identifier_check.h"
#include "proxy-server/auth/token_reviewer.h"
#include "proxy-server/node/node_service.h"
#include "proxy-server/tunnel/client_backlog.h"
#include "proxy-server/tunnel/frontend.h"
#include "proxy-server/tunnel/router.h"

namespace konn::server {

using core::tunnel::describe;
using core::tunnel::make_close_request;

Backend::Backend(Router& router) : router_(router), log_(core::log::get("server.backend")) {}

void Backend::serve(asio::io_context& home, size_t home_index,
                    const std::shared_ptr<core::h2::Stream>& stream,
                    const core::h2::CallInfo& call, const core::h2::PeerInfo& peer,
                    Router& router) {
  auto b = std::make_shared<Backend>(router);
  b->self_ = b;
  b->home_ctx_ = &home;
  b->backlog_high_ = std::min<int64_t>(
      kClientBacklogHigh, static_cast<int64_t>(router.options().tunnel_queue_cap_bytes() / 2));
  b->backlog_low_ = b->backlog_high_ / 2;
  b->home_index_ = home_index;
  b->peer_ = peer.address;
  b->connected_at_ = std::chrono::system_clock::now();
  b->metadata_ = call.metadata;
  if (peer.certificate) b->certificate_ = peer.certificate->names;
  b->attach(home, stream);
  router.metrics().grpc_connect.Increment();
  b->begin();
}

std::vector<std::string> Backend::metadata_values(std::string_view key) const {
  std::vector<std::string> out;
  for (const auto& [k, v] : metadata_) {
    if (k == key) out.push_back(v);
  }
  return out;
}

void Backend::begin() {
  auto ids = metadata_values("agentid");
  if (ids.size() != 1) {
    KONN_LOG(log_, warn, "agent from {} rejected: expected one agentid header, got {}", peer_,
             ids.size());
    router_.metrics().agent_rejected("metadata");
    close({core::h2::grpc_code::kUnknown,
           "expected one agent ID in the context, got " + std::to_string(ids.size())});
    return;
  }
  agent_id_ = ids.front();
  auto idents = metadata_values("agentidentifiers");
  if (idents.size() > 1) {
    router_.metrics().agent_rejected("metadata");
    close({core::h2::grpc_code::kUnknown,
           "expected at most one set of agent identifiers, got " + std::to_string(idents.size())});
    return;
  }
  if (!idents.empty()) {
    std::string err;
    auto parsed = core::tunnel::parse_agent_identifiers(idents.front(), false, &err);
    if (!parsed) {
      KONN_LOG(log_, warn, "agent {} from {} rejected: bad agentidentifiers: {}", agent_id_, peer_,
               err);
      router_.metrics().agent_rejected("metadata");
      close({core::h2::grpc_code::kUnknown, "invalid agent identifiers: " + err});
      return;
    }
    identifiers_ = std::move(*parsed);
  }
  identifiers_header_ = idents.empty() ? "" : idents.front();
  if (router_.options().verify_agent_identifiers == "cert" && !identifiers_proven()) return;
  if (auto* reviewer = router_.reviewer()) {
    auto auth = metadata_values("authorization");
    const std::string prefix = "Bearer ";
    if (auth.size() != 1 || auth.front().rfind(prefix, 0) != 0) {
      KONN_LOG(log_, warn,
               "agent {} from {} rejected: no bearer token (got {} authorization "
               "headers)",
               agent_id_, peer_, auth.size());
      router_.metrics().agent_rejected("token");
      close({core::h2::grpc_code::kUnauthenticated,
             "expected one \"authorization: Bearer <token>\" header"});
      return;
    }
    // The review runs elsewhere; the stream waits (no headers, no reads) until it answers.
    reviewer->review(auth.front().substr(prefix.size()), [self = self_](TokenReviewer::Verdict v) {
      if (!v.admitted) {
        KONN_LOG(self->log_, warn, "agent {} from {} rejected: {}", self->agent_id_, self->peer_,
                 v.reason);
        self->router_.metrics().agent_rejected("token");
        self->close({core::h2::grpc_code::kUnauthenticated, v.reason});
        return;
      }
      self->admit();
    });
    return;
  }
  admit();
}

bool Backend::identifiers_proven() {
  std::string why;
  const auto& cert = certificate_;
  if (!cert) {
    why = "no client certificate to prove its identifiers";
  } else if (auto unproven =
                 unproven_identifiers(identifiers_, *cert, router_.options().route_agent_names);
             !unproven.empty()) {
    why = "identifiers not proven by its certificate (CN " + cert->common_name + "): ";
    for (size_t i = 0; i < unproven.size(); ++i) why += (i == 0 ? "" : ", ") + unproven[i];
  } else {
    return true;
  }
  KONN_LOG(log_, warn, "agent {} from {} rejected: {} (--verify-agent-identifiers=cert)", agent_id_,
           peer_, why);
  router_.metrics().agent_rejected("identifiers");
  close({core::h2::grpc_code::kPermissionDenied, "agent " + why});
  return false;
}

void Backend::admit() {
  const auto& opts = router_.options();
  auto flow = metadata_values(core::tunnel::kFlowControlHeader);
  flow_control_ = flow.size() == 1 && flow.front() == core::tunnel::kFlowControlVersion;
  auto half = metadata_values(core::tunnel::kHalfCloseHeader);
  half_close_ = half.size() == 1 && half.front() == core::tunnel::kHalfCloseVersion;
  // Node to control plane: confirmed only to an agent that asked, and only when enabled here.
  auto node = metadata_values(core::tunnel::kNodeToControlPlaneHeader);
  bool node_asked = node.size() == 1 && node.front() == core::tunnel::kNodeToControlPlaneVersion;
  if (node_asked && router_.node() != nullptr) node_table_ = NodeService::new_table();

  core::h2::Metadata headers{{"serverid", opts.server_id},
                             {"servercount", std::to_string(opts.server_count)}};
  if (flow_control_) {
    headers.emplace_back(core::tunnel::kFlowControlHeader, core::tunnel::kFlowControlVersion);
  }
  if (node_table_) {
    headers.emplace_back(core::tunnel::kNodeToControlPlaneHeader,
                         core::tunnel::kNodeToControlPlaneVersion);
  }
  send_headers(std::move(headers));
  router_.add_backend(self_);
  registered_ = true;
  size_t same = router_.backends().streams_of(agent_id_);
  KONN_LOG(log_, info,
           "agent connected agentID={} peer={} identifiers={} flowControl={} halfClose={}{}{}",
           agent_id_, peer_, identifiers_header_, flow_control_, half_close_,
           node_table_ ? " nodeToControlPlane=true"
                       : (node_asked ? " nodeToControlPlane=false (not enabled here)" : ""),
           same > 1 ? " (duplicate agent id: the oldest stream not draining takes new dials)"
                    : "");
  // Read for the last time above: an idle agent keeps neither (issue 42, memory per agent).
  core::h2::Metadata().swap(metadata_);
  certificate_.reset();
  start_reading();
}

void Backend::on_queued(const Packet& p) {
  router_.metrics().packet(ServerMetrics::ToAgent, p.type());
  if (p.type() == DATA) {
    bytes_to_agent_.fetch_add(p.data().data().size(), std::memory_order_relaxed);
  }
}

std::string Backend::last_error() const {
  std::lock_guard lock(last_error_mu_);
  return last_error_;
}

void Backend::set_last_error(std::string error) {
  std::lock_guard lock(last_error_mu_);
  last_error_ = std::move(error);
}

void Backend::on_packet(Packet&& p) {
  router_.metrics().packet(ServerMetrics::FromAgent, p.type());
  if (core::tunnel::is_node_type(p.type())) {
    if (!node_table_) {
      KONN_LOG(log_, warn, "[A{}] node packet ignored: node to control plane not confirmed: {}",
               agent_id_, describe(p));
      return;
    }
    p.set_type(static_cast<PacketType>(core::tunnel::from_node_type(p.type())));
    router_.node()->handle(std::move(p), shared_from_this(), node_table_,
                           {agent_id_, peer_, identifiers_header_});
    return;
  }
  switch (p.type()) {
    case DIAL_RSP:
      on_dial_response(std::move(p));
      return;
    case DATA: {
      bytes_from_agent_.fetch_add(p.data().data().size(), std::memory_order_relaxed);
      int64_t id = p.data().connectid();
      if (auto f = connections_.find(id)) {
        f->deliver_data(std::move(p));
      } else if (id != 0) {
        // The frontend is gone: tell the agent to stop sending (upstream does the same).
        KONN_LOG(log_, debug, "[C{} A{}] DATA for unknown connection; closing it at the agent", id,
                 agent_id_);
        send(make_close_request(id));
      }
      return;
    }
    case CLOSE_RSP:
      if (auto f = connections_.take(p.closeresponse().connectid())) f->deliver_close(std::move(p));
      return;
    case DIAL_CLS:
      if (auto e = router_.pending().take(p.closedial().random())) {
        if (auto f = e->frontend.lock()) f->deliver_close(std::move(p));
      }
      return;
    case DRAIN:
      if (!draining_.exchange(true)) {
        router_.backends().draining(this);
        KONN_LOG(log_, info, "agent {} is draining: no new dials while other agents serve",
                 agent_id_);
      }
      return;
    case KONN_WINDOW_UPDATE:
      if (auto f = connections_.find(p.windowupdate().connectid())) {
        f->deliver_window_update(p.windowupdate().bytes());
      }
      return;
    case KONN_CLOSE_WRITE:
      if (auto f = connections_.find(p.closewrite().connectid())) {
        f->deliver_close_write(std::move(p));
      }
      return;
    default:
      KONN_LOG(log_, warn, "[A{}] unexpected packet from agent ignored: {}", agent_id_,
               describe(p));
      return;
  }
}

void Backend::on_dial_response(Packet&& p) {
  const auto& rsp = p.dialresponse();
  int64_t random = rsp.random();
  int64_t id = rsp.connectid();
  auto entry = router_.pending().take(random);
  if (!entry) {
    router_.dial_failed("unrecognized_response", this, {});
    KONN_LOG(log_, debug, "[C{} D{} A{}] DIAL_RSP for no pending dial (the frontend gave up)", id,
             random, agent_id_);
    if (id != 0 && rsp.error().empty()) send(make_close_request(id));
    return;
  }
  auto f = entry->frontend.lock();
  // Failures only: a successful dial does not pay for the copy.
  auto destination = [&f] { return f ? f->status().destination : std::string(); };
  if (!rsp.error().empty()) {
    router_.dial_failed("error_response", this, destination(), rsp.error());
    if (f) f->deliver_dial_response(std::move(p));
    return;
  }
  if (!f) {
    router_.dial_failed("send_rsp", this, destination());
    send(make_close_request(id));
    return;
  }
  if (connections_.find(id)) {
    // A broken or hostile agent answered with a connectID that an open tunnel of this stream
    // holds. Registering it would orphan that tunnel (its packets would go to this dial, and the
    // stream's end would no longer close it), so this dial is refused instead. No CLOSE_REQ goes
    // to the agent: for that id it would end the other tunnel.
    router_.dial_failed("error_response", this, destination(),
                        "connection id " + std::to_string(id) + " already in use");
    KONN_LOG(log_, warn,
             "[C{} D{} A{}] DIAL_RSP reuses connection id {}, which an open tunnel of this agent "
             "holds; dial refused",
             id, random, agent_id_, id);
    auto* r = p.mutable_dialresponse();
    r->set_connectid(0);
    r->set_error("agent " + agent_id_ + " answered with connection id " + std::to_string(id) +
                 ", already in use on its stream");
    f->deliver_dial_response(std::move(p));
    return;
  }
  // Register before delivering: the agent's first DATA for `id` is read only after this returns.
  connections_.add(id, f);
  if (!f->deliver_dial_response(std::move(p))) {
    router_.dial_failed("send_rsp", this, destination());
    connections_.take(id);
    send(make_close_request(id));
  }
}

void Backend::on_read_end() {
  if (registered_.exchange(false)) {
    router_.remove_backend(this);
    size_t pending = 0;
    for (auto& weak : router_.pending().take_all(this)) {
      auto f = weak.lock();
      router_.dial_failed("backend_close", this, f ? f->status().destination : std::string(),
                          "agent stream ended");
      if (f) {
        f->backend_gone();
        ++pending;
      }
    }
    auto conns = connections_.take_all();
    for (auto& f : conns) f->backend_gone();
    if (node_table_) NodeService::stream_ended(node_table_);
    KONN_LOG(log_, info,
             "agent disconnected agentID={} peer={}: {} tunnels closed, {} pending dials failed",
             agent_id_, peer_, conns.size(), pending);
  }
  close();
}

void Backend::client_backlog(int64_t delta) {
  const int64_t now = client_backlog_.fetch_add(delta) + delta;
  const bool paused = paused_for_clients_.load();
  if ((!paused && now > backlog_high_) || (paused && now <= backlog_low_)) {
    on_home_thread([this] { update_client_gate(); });
  }
}

void Backend::watch_client(const ClientBacklog* backlog, std::weak_ptr<Frontend> frontend) {
  std::lock_guard lock(watched_mu_);
  watched_[backlog] = std::move(frontend);
}

void Backend::unwatch_client(const ClientBacklog* backlog) {
  std::lock_guard lock(watched_mu_);
  watched_.erase(backlog);
}

void Backend::update_client_gate() {
  for (;;) {
    const int64_t bytes = client_backlog_.load();
    if (!paused_for_clients_.load() && bytes > backlog_high_ && !over_) {
      paused_for_clients_.store(true);
      router_.metrics().reads_paused_total.Add({{"reason", "clients_behind"}}).Increment();
      router_.metrics().blocked_write_channels.Increment();
      KONN_LOG(log_, debug, "[A{}] {} bytes wait for slow clients: agent stream paused",
               agent_id_, bytes);
      pause_reading(core::relay::PauseReason::ClientsBehind);
      arm_stall_check();
    } else if (paused_for_clients_.load() && (bytes <= backlog_low_ || over_)) {
      paused_for_clients_.store(false);
      router_.metrics().blocked_write_channels.Decrement();
      if (stall_timer_) stall_timer_->cancel();
      KONN_LOG(log_, debug, "[A{}] clients caught up ({} bytes wait): agent stream resumed",
               agent_id_, bytes);
      resume_reading(core::relay::PauseReason::ClientsBehind);
    } else {
      return;
    }
  }
}

void Backend::arm_stall_check() {
  const auto bound = router_.options().stalled_client_timeout;
  if (bound.count() <= 0 || home_ctx_ == nullptr) return;
  if (!stall_timer_) stall_timer_ = std::make_unique<asio::steady_timer>(*home_ctx_);
  // Looked at a few times per bound, so a stalled client is closed within 1.25 bounds.
  stall_timer_->expires_after(std::max<std::chrono::steady_clock::duration>(
      bound / 4, std::chrono::milliseconds(10)));
  stall_timer_->async_wait([weak = weak_from_this(), this](std::error_code ec) {
    auto keep = weak.lock();
    if (ec || !keep) return;
    check_stalled_clients();
  });
}

void Backend::check_stalled_clients() {
  if (!paused_for_clients_.load() || over_) return;
  const auto bound = router_.options().stalled_client_timeout;
  const auto now = std::chrono::steady_clock::now();
  // Each frontend is held while its backlog is read: the backlog is one of its members.
  std::vector<std::pair<std::shared_ptr<Frontend>, const ClientBacklog*>> watched;
  {
    std::lock_guard lock(watched_mu_);
    watched.reserve(watched_.size());
    for (const auto& [backlog, weak] : watched_) {
      if (auto f = weak.lock()) watched.emplace_back(std::move(f), backlog);
    }
  }
  for (auto& [f, backlog] : watched) {
    if (backlog->stalled_for(now) < bound) continue;
    KONN_CONN_LOG(log_, warn, *f,
                  "closing tunnel: the client took none of the {} bytes waiting for it in {} ms "
                  "(--stalled-client-timeout) while agent {} waited; its other tunnels move again",
                  backlog->waiting(),
                  std::chrono::duration_cast<std::chrono::milliseconds>(bound).count(), agent_id_);
    f->close_stalled(bound);
  }
  if (paused_for_clients_.load()) arm_stall_check();
}

void Backend::OnDone() {
  over_ = true;
  if (stall_timer_) stall_timer_->cancel();
  // No longer a stream blocked behind its clients (update_client_gate never pauses it again).
  if (paused_for_clients_.exchange(false)) router_.metrics().blocked_write_channels.Decrement();
  mark_done();
  if (!cancelled_by_us_) {
    router_.metrics().call_errors(ServerMetrics::FromAgent, ServerMetrics::ToAgent,
                                  peer_cancelled(), failed_write_type_);
  }
  // After the errors are counted: whoever sees the gauge drop sees them too.
  router_.metrics().grpc_connect.Decrement();
  on_read_end();  // idempotent; covers streams finished before reading began
  self_.reset();  // may destroy this
}

}  // namespace konn::server
