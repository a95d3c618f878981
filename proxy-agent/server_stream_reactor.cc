#include "proxy-agent/server_stream_reactor.h"

#include <charconv>
#include <random>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>

#include "core/log/log_macros.h"
#include "core/tunnel/packet.h"
#include "proxy-agent/server_connector.h"

namespace konn::agent {
namespace {

namespace tunnel = core::tunnel;
namespace h2 = core::h2;

spdlog::logger& stream_logger() {
  static const auto log = core::log::get("agent.stream");
  return *log;
}

constexpr char kConnectPath[] = "/AgentService/Connect";
// The largest packet accepted from a server (as the gRPC channel's limit was).
constexpr size_t kMaxPacketBytes = 64 * 1024 * 1024;

// Reads the response headers as upstream's agent does: exactly one serverid, exactly one
// decimal servercount. konn-flow-control: 1 turns our credit extension on.
Handshake check_headers(const h2::Metadata& md) {
  Handshake h;
  size_t n_ids = 0;
  size_t n_counts = 0;
  std::string count;
  for (const auto& [key, value] : md) {
    if (key == "serverid") {
      ++n_ids;
      h.server_id = value;
    } else if (key == "servercount") {
      ++n_counts;
      count = value;
    } else if (key == tunnel::kFlowControlHeader && value == tunnel::kFlowControlVersion) {
      h.flow_control = true;
    } else if (key == tunnel::kNodeToControlPlaneHeader &&
               value == tunnel::kNodeToControlPlaneVersion) {
      h.node_to_control_plane = true;
    }
  }
  if (n_ids != 1) {
    h.error = "expected one serverid header, got " + std::to_string(n_ids);
    return h;
  }
  if (n_counts != 1) {
    h.error = "expected one servercount header, got " + std::to_string(n_counts);
    return h;
  }
  auto [ptr, ec] = std::from_chars(count.data(), count.data() + count.size(), h.server_count);
  if (count.empty() || ec != std::errc() || ptr != count.data() + count.size()) {
    h.error = "servercount header \"" + count + "\" is not a decimal number";
    return h;
  }
  h.ok = true;
  return h;
}

}  // namespace

std::shared_ptr<ServerStreamReactor> ServerStreamReactor::create(
    core::io::WorkerPool::Placement home, StreamConfig config, core::io::WorkerPool& pool,
    std::shared_ptr<AgentStats> stats, HandshakeCallback on_handshake, EndCallback on_end) {
  return std::make_shared<ServerStreamReactor>(std::move(home), std::move(config), pool,
                                               std::move(stats), std::move(on_handshake),
                                               std::move(on_end));
}

ServerStreamReactor::ServerStreamReactor(core::io::WorkerPool::Placement home, StreamConfig config,
                                         core::io::WorkerPool& pool,
                                         std::shared_ptr<AgentStats> stats,
                                         HandshakeCallback on_handshake, EndCallback on_end)
    : home_(home.ctx),
      home_index_(home.index),
      lease_(std::move(home.lease)),
      config_(std::move(config)),
      pool_(pool),
      stats_(std::move(stats)),
      on_handshake_(std::move(on_handshake)),
      on_end_(std::move(on_end)) {}

ServerStreamReactor::~ServerStreamReactor() = default;

std::shared_ptr<ServerStreamReactor> ServerStreamReactor::self_ptr() {
  return std::static_pointer_cast<ServerStreamReactor>(shared_from_this());
}

template <typename Fn>
void ServerStreamReactor::on_home_thread(Fn&& fn) {
  if (home_.get_executor().running_in_this_thread()) {
    auto self = self_ptr();  // fn may end the call, and its owner drop the reactor
    fn();
    return;
  }
  asio::post(home_, [self = self_ptr(), fn = std::forward<Fn>(fn)]() mutable {
    (void)self;
    fn();
  });
}

void ServerStreamReactor::start() {
  {
    std::lock_guard lock(mu_);
    self_ = self_ptr();
    started_ = std::chrono::steady_clock::now();
  }
  asio::co_spawn(home_, connect_and_call(), asio::detached);
}

core::io::Awaitable<void> ServerStreamReactor::connect_and_call() {
  auto self = self_ptr();
  ServerConnectResult connected = co_await connect_server(home_.get_executor(), config_.server);
  std::string error = std::move(connected.error);
  std::unique_ptr<h2::Transport> transport = std::move(connected.transport);
  if (connected.proxy_failure) {
    std::lock_guard lock(mu_);
    proxy_failure_ = std::move(connected.proxy_failure);
  }
  // Ended while connecting (cancelled, or the agent stopping): nothing to start.
  if (stream_over_) co_return;
  if (transport) {
    h2::ConnectionOptions options;
    options.authority = config_.target;
    options.scheme = "https";
    options.user_agent = "konn-proxy-agent";
    options.keepalive_interval = config_.keepalive;
    options.max_message_bytes = kMaxPacketBytes;
    options.log_name = "[agent h2 " + config_.target + "]";
    conn_ = h2::Connection::create(h2::Connection::Role::Client, std::move(transport), options);
    conn_->set_on_close([this](const std::string&) { connection_lost_ = true; });
    conn_->start();
    h2::Metadata md{{"agentid", config_.agent_id}, {"agentidentifiers", config_.agent_identifiers}};
    if (!config_.token.empty()) md.emplace_back("authorization", "Bearer " + config_.token);
    md.emplace_back(tunnel::kFlowControlHeader, tunnel::kFlowControlVersion);
    md.emplace_back(tunnel::kHalfCloseHeader, tunnel::kHalfCloseVersion);
    if (config_.node_to_control_plane) {
      md.emplace_back(tunnel::kNodeToControlPlaneHeader, tunnel::kNodeToControlPlaneVersion);
    }
    h2::StreamCallbacks cb;
    // Raw `this`: the reactor holds itself (self_) until OnDone, which waits for the stream's
    // end, after which the stream calls nothing.
    cb.on_headers = [this](const h2::Metadata& m) { on_response_headers(m); };
    cb.on_message = [this](std::string&& m) { on_message(std::move(m)); };
    cb.on_end = [this](const h2::GrpcStatus& st, const h2::Metadata&) { on_stream_end(st); };
    stream_ = conn_->start_call(kConnectPath, md, std::move(cb));
    if (stream_) {
      // Not paused before the handshake: a server that refuses the agent ends the call without
      // response headers, and a paused stream would hold that end back. A message that comes
      // while no read is outstanding pauses it (on_message).
      stream_->set_on_drained([this] {
        if (!write_outstanding_) return;
        write_outstanding_ = false;
        handle_write_done(true);
      });
      if (const Packet* p = std::exchange(deferred_write_, nullptr)) write_packet(p);
      co_return;
    }
    error = "the connection closed before the call started";
  }
  // No stream: the call is over before it began.
  {
    std::lock_guard lock(mu_);
    if (handshake_error_.empty()) handshake_error_ = error;
  }
  on_stream_end(h2::GrpcStatus{h2::grpc_code::kUnavailable, error});
}

void ServerStreamReactor::on_response_headers(const h2::Metadata& md) {
  headers_seen_ = true;
  Handshake h = check_headers(md);
  if (!h.ok) {
    {
      std::lock_guard lock(mu_);
      handshake_error_ = h.error;
    }
    // The reason is reported from OnDone, where the call's status is known.
    close({h2::grpc_code::kCancelled, h.error}, true);
    return;
  }
  {
    std::lock_guard lock(mu_);
    server_id_ = h.server_id;
    flow_control_ = h.flow_control;
    node_confirmed_ = config_.node_to_control_plane && h.node_to_control_plane;
  }
  bool keep = on_handshake_ ? on_handshake_(self_ptr(), h) : true;
  if (!keep) {
    {
      std::lock_guard lock(mu_);
      handshake_error_ = "not kept";
      accepted_ = false;
    }
    close({h2::grpc_code::kCancelled, "duplicate server"}, true);
    return;
  }
  {
    std::lock_guard lock(mu_);
    accepted_ = true;
  }
  KONN_LOG((&stream_logger()), info, "{}connected: servercount={} flow-control={}{}", log_prefix(),
           h.server_count, h.flow_control ? "on" : "off",
           config_.node_to_control_plane ? (h.node_to_control_plane ? " node-to-control-plane=on"
                                                                    : " node-to-control-plane=off")
                                         : "");
  start_reading();
}

void ServerStreamReactor::cancel_stream() {
  if (!stream_ || stream_over_) return;
  // A paused stream would hold its end until resumed: what is still to come is dropped instead.
  discarding_ = true;
  held_.reset();
  auto stream = stream_;  // the end may come inside cancel(), and OnDone release stream_
  stream->cancel();
  if (!stream_over_) stream->resume_reading();
}

void ServerStreamReactor::on_message(std::string&& message) {
  if (discarding_) return;
  if (read_target_ == nullptr) {
    // No read outstanding (reading is paused): keep it, and let HTTP/2 flow control hold the rest.
    held_ = std::move(message);
    stream_->pause_reading();
    return;
  }
  if (!read_target_->ParseFromString(message)) {
    KONN_LOG((&stream_logger()), warn,
             "{}a message from the server is not a Packet ({} bytes); "
             "ending the stream",
             log_prefix(), message.size());
    parse_failed_ = true;
    cancel_stream();
    return;
  }
  read_target_ = nullptr;
  handle_read_done(true);
}

void ServerStreamReactor::on_stream_end(const h2::GrpcStatus& status) {
  if (stream_over_) return;
  stream_over_ = true;
  held_.reset();
  if (parse_failed_) {
    final_status_ = h2::GrpcStatus{h2::grpc_code::kInternal, "a message is not a Packet"};
  } else {
    final_status_ = status;
  }
  if (!headers_seen_) {
    std::lock_guard lock(mu_);
    if (handshake_error_.empty()) handshake_error_ = "stream failed before response headers";
  }
  if (read_target_ != nullptr) {
    read_target_ = nullptr;
    handle_read_done(false);
  }
  if (write_outstanding_) {
    write_outstanding_ = false;
    handle_write_done(false);
  } else if (const Packet* p = std::exchange(deferred_write_, nullptr)) {
    (void)p;
    handle_write_done(false);
  }
  close(final_status_);
  settle();
}

void ServerStreamReactor::settle() {
  if (--holds_ == 0) OnDone(final_status_);
}

void ServerStreamReactor::drain() {
  KONN_LOG((&stream_logger()), info, "{}sending DRAIN", log_prefix());
  send(tunnel::make_drain());
}

bool ServerStreamReactor::connection_lost() const { return connection_lost_; }

std::optional<ProxyFailure> ServerStreamReactor::proxy_failure() const {
  std::lock_guard lock(mu_);
  return proxy_failure_;
}

std::string ServerStreamReactor::server_id() const {
  std::lock_guard lock(mu_);
  return server_id_;
}

bool ServerStreamReactor::flow_control() const {
  std::lock_guard lock(mu_);
  return flow_control_;
}

bool ServerStreamReactor::node_ready() const {
  std::lock_guard lock(mu_);
  return node_confirmed_ && accepted_ && !ended_;
}

std::string ServerStreamReactor::log_prefix() const {
  std::lock_guard lock(mu_);
  return "[S" + (server_id_.empty() ? std::string("?") : server_id_) + " " + config_.target + "] ";
}

void ServerStreamReactor::OnDone(const h2::GrpcStatus& status) {
  mark_done();
  if (conn_) {
    // GOAWAY, then the connection closes (its stream has ended). It lives on in its handlers,
    // which must not reach this reactor any more.
    conn_->set_on_close(nullptr);
    conn_->shutdown();
    conn_.reset();
  }
  stream_.reset();
  std::string why = status.ok()
                        ? std::string("stream finished")
                        : "stream ended: " + std::to_string(status.code) + " " + status.message;
  bool handshake_failed = false;
  {
    std::lock_guard lock(mu_);
    handshake_failed = !accepted_;
    if (handshake_failed && !handshake_error_.empty() && handshake_error_ != "not kept") {
      why = handshake_error_ +
            (status.ok() || status.message == handshake_error_ ? "" : " (" + status.message + ")");
    }
  }
  // As upstream: a failed receive (not a clean end) and a failed send are stream errors, and
  // also the deprecated server_connection_failure_count. Our own cancellation is neither.
  if (!handshake_failed && !status.ok() && !cancelled_by_us_) {
    std::string code = tunnel::grpc_code_name(status.code);
    stats_->stream_error("to_agent", code, "Unknown");
    stats_->server_recv_failures.fetch_add(1, std::memory_order_relaxed);
    if (int type = failed_write_type_; type >= 0) {
      stats_->stream_error("from_agent", code,
                           tunnel::packet_type_label(tunnel::packet_type_slot(type)));
      stats_->server_send_failures.fetch_add(1, std::memory_order_relaxed);
    }
  }
  end(why);
  std::shared_ptr<ServerStreamReactor> last;
  {
    std::lock_guard lock(mu_);
    last = std::move(self_);
  }
  auto on_end = std::move(on_end_);
  // The owner may release `last` at once on another thread: nothing touches members after this.
  if (on_end) on_end(std::move(last), handshake_failed, why);
}

void ServerStreamReactor::start_write_op(const Packet* p, tunnel::WriteOptions) {
  on_home_thread([this, p] {
    if (stream_over_) {
      handle_write_done(false);
    } else if (!stream_) {
      deferred_write_ = p;  // sent once the call started
    } else {
      write_packet(p);
    }
  });
}

void ServerStreamReactor::write_packet(const Packet* p) {
  // A DATA payload goes from the packet into the connection's write buffer: the packet stays in
  // PacketStream's hands until this write is done (on_drained, or the stream's end).
  tunnel::FramedPacket framed = tunnel::frame_packet(*p);
  write_outstanding_ = true;
  auto stream = stream_;  // its end may come inside, and OnDone release stream_
  if (!stream->send_framed(std::move(framed.head), framed.payload)) {
    write_outstanding_ = false;
    handle_write_done(false);
  }
  // Otherwise done once HTTP/2 took its bytes (on_drained), which may already have happened.
}

void ServerStreamReactor::start_read_op(Packet* p) {
  on_home_thread([this, p] {
    if (stream_over_) {
      handle_read_done(false);
      return;
    }
    read_target_ = p;
    if (held_) {
      // Delivered from the loop, not from inside this call: the read that follows it starts
      // from the delivery, and must not nest in this one.
      asio::post(home_, [this, self = self_ptr()] {
        if (!held_ || read_target_ == nullptr || stream_over_) return;
        std::string m = std::move(*held_);
        held_.reset();
        on_message(std::move(m));
        if (!held_ && read_target_ != nullptr && stream_ && !stream_over_) {
          auto stream = stream_;  // its end may come inside, and OnDone release stream_
          stream->resume_reading();
        }
      });
      return;
    }
    if (stream_->reading_paused()) {
      auto stream = stream_;  // its end may come inside, and OnDone release stream_
      stream->resume_reading();
    }
  });
}

void ServerStreamReactor::start_finish_op(const h2::GrpcStatus&) {
  // A client has no finish of its own: half-close our side so the server ends the call. OnDone
  // comes once the stream has ended too.
  on_home_thread([this] {
    // Still connecting: the call ends now, and the connection is dropped once it comes.
    if (!stream_ && !stream_over_) {
      on_stream_end(h2::GrpcStatus{h2::grpc_code::kCancelled, "closed while connecting"});
    }
    if (stream_ && !stream_over_) {
      // No read starts any more: what the server still sends is dropped, so a message held
      // while no read was outstanding does not leave the stream paused and its end parked.
      discarding_ = true;
      held_.reset();
      auto stream = stream_;  // its end may come inside, and OnDone release stream_
      stream->half_close();
      if (!stream_over_ && stream->reading_paused()) stream->resume_reading();
    }
    settle();
  });
}

void ServerStreamReactor::cancel_op(const h2::GrpcStatus&) {
  cancelled_by_us_ = true;
  on_home_thread([this] {
    if (!stream_ && !stream_over_) {
      // Still connecting: the call ends now, and the connection is dropped once it comes.
      on_stream_end(h2::GrpcStatus{h2::grpc_code::kCancelled, "cancelled while connecting"});
      return;
    }
    cancel_stream();
  });
}

void ServerStreamReactor::on_queued(const Packet& p) {
  stats_->packets_sent[tunnel::packet_type_slot(p.type())].fetch_add(1, std::memory_order_relaxed);
}

void ServerStreamReactor::on_write_failed(const Packet& p) {
  failed_write_type_ = p.type();
  KONN_LOG((&stream_logger()), warn, "{}writing {} to the server failed; closing the stream", log_prefix(),
           tunnel::describe(p));
  // The stream is broken for us: end it, so the agent reconnects. Not our own close: OnDone
  // still counts the stream error.
  on_home_thread([this] { cancel_stream(); });
}

void ServerStreamReactor::on_read_end() {
  end("read side ended");
  close();
}

void ServerStreamReactor::end(const std::string& why) {
  bool was_accepted = false;
  {
    std::lock_guard lock(mu_);
    if (ended_) return;
    ended_ = true;
    was_accepted = accepted_;
  }
  auto conns = table_->take_all();
  for (auto& c : conns) c->abandon();
  auto nodes = node_table_->take_all();
  for (auto& c : nodes) c->abandon();
  if (was_accepted) {
    KONN_LOG((&stream_logger()), info,
             "{}disconnected ({}); closed {} endpoint connection(s) and {} node-to-control-plane "
             "connection(s)",
             log_prefix(), why, conns.size(), nodes.size());
  }
}

void ServerStreamReactor::on_packet(Packet&& p) {
  stats_->packets_received[tunnel::packet_type_slot(p.type())].fetch_add(1,
                                                                         std::memory_order_relaxed);
  if (tunnel::is_node_type(p.type())) {
    bool confirmed = false;
    {
      std::lock_guard lock(mu_);
      confirmed = node_confirmed_;
    }
    if (!confirmed) {
      KONN_LOG((&stream_logger()), warn, "{}ignoring {}: node-to-control-plane not negotiated",
               log_prefix(), tunnel::describe(p));
      return;
    }
    p.set_type(static_cast<PacketType>(tunnel::from_node_type(p.type())));
    handle_node_packet(std::move(p));
    return;
  }
  switch (p.type()) {
    case DIAL_REQ:
      handle_dial(p.dialrequest());
      return;
    case DATA: {
      int64_t id = p.data().connectid();
      if (auto c = table_->find(id)) {
        c->deliver(std::move(p));
      } else {
        stats_->unknown_connect_ids.fetch_add(1, std::memory_order_relaxed);
        KONN_LOG((&stream_logger()), debug, "{}DATA for unknown connectID {}", log_prefix(), id);
        send(tunnel::make_close_response(id, "unrecognized connectID"));
      }
      return;
    }
    case CLOSE_REQ: {
      int64_t id = p.closerequest().connectid();
      if (auto c = table_->find(id)) {
        c->close_request();
      } else {
        stats_->unknown_connect_ids.fetch_add(1, std::memory_order_relaxed);
        KONN_LOG((&stream_logger()), debug, "{}CLOSE_REQ for unknown connectID {}", log_prefix(), id);
        send(tunnel::make_close_response(id, "Unknown connectID"));
      }
      return;
    }
    case DIAL_CLS: {
      int64_t random = p.closedial().random();
      if (auto c = table_->find_dial(random)) {
        c->cancel_dial();
      } else {
        KONN_LOG((&stream_logger()), debug, "{}DIAL_CLS for unknown dial {}", log_prefix(), random);
      }
      return;
    }
    case KONN_WINDOW_UPDATE: {
      if (!flow_control()) {
        KONN_LOG((&stream_logger()), warn, "{}ignoring KONN_WINDOW_UPDATE: flow control not negotiated",
                 log_prefix());
        return;
      }
      if (auto c = table_->find(p.windowupdate().connectid())) {
        c->add_credit(p.windowupdate().bytes());
      }
      return;
    }
    case KONN_CLOSE_WRITE: {
      // Only tunnels dialled with konnHalfClose accept it; others ignore it (see close_write).
      if (auto c = table_->find(p.closewrite().connectid())) c->close_write();
      return;
    }
    default:
      KONN_LOG((&stream_logger()), warn, "{}ignoring unexpected packet {}", log_prefix(),
               tunnel::describe(p));
      return;
  }
}

void ServerStreamReactor::handle_dial(const DialRequest& req) {
  const std::string& address = req.address();
  int64_t random = req.random();
  // Only TCP: upstream dials the protocol verbatim (udp, unix, ...), which would let a dial reach
  // sockets and services a TCP proxy never should.
  if (req.protocol() != "tcp") {
    stats_->dials_refused[AgentStats::RefusedProtocol].fetch_add(1, std::memory_order_relaxed);
    KONN_LOG((&stream_logger()), warn, "{}[D{}] dial refused: protocol \"{}\" to {} (only tcp is dialled)",
             log_prefix(), random, req.protocol(), address);
    std::string error =
        "dial " + req.protocol() + " " + address + ": unknown network " + req.protocol();
    stats_->refused("protocol", address, error);
    send(tunnel::make_dial_response(random, 0, error));
    return;
  }
  int64_t limit = config_.max_endpoint_connections;
  if (limit > 0 && stats_->endpoint_slots.load(std::memory_order_relaxed) >= limit) {
    stats_->limits_hit[AgentStats::LimitEndpointConnections].fetch_add(1,
                                                                       std::memory_order_relaxed);
    KONN_LOG((&stream_logger()), warn,
             "{}[D{}] dial to {} refused: {} endpoint connections open "
             "(--max-endpoint-connections)",
             log_prefix(), random, address, limit);
    std::string error = "dial tcp " + address +
                        ": konn agent: too many endpoint connections (limit " +
                        std::to_string(limit) + ", --max-endpoint-connections)";
    stats_->refused("endpoint_connections", address, error);
    send(tunnel::make_dial_response(random, 0, error));
    return;
  }
  core::endpoint::EndpointSettings settings = config_.endpoint;
  std::string server_id;
  {
    std::lock_guard lock(mu_);
    settings.flow_control = flow_control_;
    server_id = server_id_;
  }
  settings.half_close = req.konnhalfclose();
  int64_t id = table_->allocate_connect_id();
  // On the stream's own worker: packets between the two are passed on one thread, with no post.
  auto place = pool_.place_at(home_index_);
  auto conn = std::make_shared<core::endpoint::EndpointConnection>(
      place.ctx, shared_from_this(), table_, id, random, server_id, settings, stats_,
      std::move(place.lease));
  if (!table_->add_dial(random, conn)) {
    KONN_LOG((&stream_logger()), warn, "{}refusing dial {}: dial id {} already in use", log_prefix(),
             address, random);
    send(tunnel::make_dial_response(random, 0, "dial tcp " + address + ": dial id already in use"));
    return;
  }
  conn->start(address);
}

}  // namespace konn::agent

namespace konn::agent {

void ServerStreamReactor::open_node_tunnel(asio::ip::tcp::socket socket,
                                           const std::string& destination, asio::io_context& ctx,
                                           core::io::DescriptorReserve::Lease lease) {
  std::string server_id;
  {
    std::lock_guard lock(mu_);
    server_id = server_id_;
  }
  // Our dial ids: random, positive, as a konnectivity client's.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  auto dial_id = static_cast<int64_t>((rng() >> 1) | 1);
  auto conn = std::make_shared<core::endpoint::EndpointConnection>(
      ctx, shared_from_this(), node_table_, 0, dial_id, "S" + server_id, config_.node_endpoint,
      config_.node_stats, std::move(lease));
  if (!node_table_->add_dial(dial_id, conn)) {
    KONN_LOG((&stream_logger()), warn, "{}node-to-control-plane connection closed: the stream ended",
             log_prefix());
    std::error_code ignored;
    socket.close(ignored);
    return;
  }
  conn->start_accepted(std::move(socket), destination);
}

void ServerStreamReactor::close_node_connections(const std::string& why) {
  auto nodes = node_table_->take_all();
  for (auto& c : nodes) c->close_request();
  if (!nodes.empty()) {
    KONN_LOG((&stream_logger()), info, "{}closing {} node-to-control-plane connection(s): {}",
             log_prefix(), nodes.size(), why);
  }
}

void ServerStreamReactor::handle_node_packet(Packet&& p) {
  auto& nstats = *config_.node_stats;
  switch (p.type()) {
    case DIAL_RSP: {
      const auto& rsp = p.dialresponse();
      auto c = node_table_->find_dial(rsp.random());
      bool ok = rsp.error().empty() && rsp.connectid() != 0;
      if (!c || !c->accepted()) {
        KONN_LOG((&stream_logger()), debug, "{}node DIAL_RSP for no pending dial {}", log_prefix(),
                 rsp.random());
        if (ok) send(tunnel::as_node(tunnel::make_close_response(rsp.connectid(), "dialler gone")));
        return;
      }
      if (ok && node_table_->find(rsp.connectid())) {
        // A connectID in use names another tunnel: this dial fails, the other one stays (no
        // close for that id: it would end the other tunnel).
        c->dial_answered(0, "server answered with connection id " +
                                std::to_string(rsp.connectid()) + ", already in use");
        return;
      }
      if (ok && !node_table_->establish(rsp.random(), rsp.connectid(), c.get())) {
        send(tunnel::as_node(tunnel::make_close_response(rsp.connectid(), "dialler gone")));
        return;
      }
      // Findable by its connectID before the next packet is read: DATA may follow at once.
      c->dial_answered(
          ok ? rsp.connectid() : 0,
          ok ? std::string() : (rsp.error().empty() ? "no connection id" : rsp.error()));
      return;
    }
    case DATA: {
      if (auto c = node_table_->find(p.data().connectid())) {
        c->deliver(std::move(p));
      } else {
        nstats.unknown_connect_ids.fetch_add(1, std::memory_order_relaxed);
        send(tunnel::as_node(
            tunnel::make_close_response(p.data().connectid(), "unrecognized connectID")));
      }
      return;
    }
    case CLOSE_RSP:
      if (auto c = node_table_->find(p.closeresponse().connectid())) {
        c->peer_closed(p.closeresponse().error());
      }
      return;
    case KONN_WINDOW_UPDATE:
      if (auto c = node_table_->find(p.windowupdate().connectid())) {
        c->add_credit(p.windowupdate().bytes());
      }
      return;
    case KONN_CLOSE_WRITE:
      if (auto c = node_table_->find(p.closewrite().connectid())) c->close_write();
      return;
    default:
      KONN_LOG((&stream_logger()), warn, "{}ignoring unexpected node packet {}", log_prefix(),
               tunnel::describe(p));
      return;
  }
}

}  // namespace konn::agent
