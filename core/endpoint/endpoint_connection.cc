#include "core/endpoint/endpoint_connection.h"

#include <algorithm>
#include <limits>

#include "core/config/duration.h"
#include "core/endpoint/connection_table.h"
#include "core/error/errc.h"
#include "core/log/log_macros.h"
#include "core/net/dialer.h"
#include "core/tunnel/packet.h"

namespace konn::core::endpoint {
namespace {

using namespace asio::experimental::awaitable_operators;
using core::io::use_nothrow;
using core::relay::PauseReason;
namespace tunnel = core::tunnel;
using Side = tunnel::TunnelLife::Side;

spdlog::logger& forward_logger() {
  static const auto log = core::log::get("agent.endpoint");
  return *log;
}

spdlog::logger& node_logger() {
  static const auto log = core::log::get("node.tunnel");
  return *log;
}

// Writes gathered into one async_write (one writev): enough to empty a queue of small packets.
constexpr size_t kMaxGather = 16;

// How long a node-side connection waits for the server's answer to its dial (the server bounds
// its own dial with --node-to-control-plane-dial-timeout; this only covers a server that never
// answers), as konnectivity-client's dial backstop.
constexpr std::chrono::seconds kNodeDialBackstop{30};

}  // namespace

EndpointConnection::EndpointConnection(asio::io_context& ctx,
                                       std::shared_ptr<tunnel::PacketStream> stream,
                                       std::shared_ptr<ConnectionTable> table, int64_t connect_id,
                                       int64_t dial_id, std::string server_id,
                                       const EndpointSettings& settings,
                                       std::shared_ptr<EndpointStats> stats,
                                       core::io::DescriptorReserve::Lease lease)
    : lease_(std::move(lease)),
      ctx_(ctx),
      stream_(std::move(stream)),
      table_(std::move(table)),
      connect_id_(connect_id),
      dial_id_(dial_id),
      server_id_(std::move(server_id)),
      settings_(settings),
      stats_(std::move(stats)),
      prefix_(make_prefix()),
      socket_(ctx),
      cancel_timer_(ctx, asio::steady_timer::time_point::max()),
      gate_timer_(ctx),
      flush_timer_(ctx) {
  if (stats_) stats_->endpoint_slots.fetch_add(1, std::memory_order_relaxed);
}

EndpointConnection::~EndpointConnection() {
  if (stats_) stats_->endpoint_slots.fetch_sub(1, std::memory_order_relaxed);
  end_half_close();
}

spdlog::logger& EndpointConnection::logger() const {
  return settings_.node_direction ? node_logger() : forward_logger();
}

std::string EndpointConnection::make_prefix() const {
  // Node tunnels name their peer as the caller gave it ("A<agent id>" on the server,
  // "S<server id>" on the agent).
  if (settings_.node_direction) {
    return "[node C" + std::to_string(connect_id_) + " D" + std::to_string(dial_id_) + " " +
           server_id_ + "] ";
  }
  return "[C" + std::to_string(connect_id_) + " D" + std::to_string(dial_id_) + " S" + server_id_ +
         "] ";
}

bool EndpointConnection::send_packet(Packet&& p,
                                     std::shared_ptr<core::tunnel::WriteListener> listener) {
  if (settings_.node_direction) p.set_type(static_cast<PacketType>(tunnel::to_node_type(p.type())));
  return stream_->send(std::move(p), std::move(listener));
}

EndpointConnection::Status EndpointConnection::status() const {
  Status out;
  {
    std::lock_guard lock(status_mu_);
    out.destination = destination_;
  }
  out.started = life_.started();
  out.bytes_from_endpoint = life_.bytes_out();
  out.bytes_to_endpoint = life_.bytes_in();
  return out;
}

void EndpointConnection::start(std::string address) {
  {
    std::lock_guard lock(status_mu_);
    destination_ = address;
  }
  configure_life();
  if (auto to = core::net::literal_endpoint(address)) {
    asio::post(ctx_, [self = shared_from_this(), to = *to, address = std::move(address)]() mutable {
      self->connect(to, std::move(address));
    });
    return;
  }
  asio::co_spawn(ctx_, dial(std::move(address)), asio::detached);
}

void EndpointConnection::start_accepted(asio::ip::tcp::socket socket, std::string address) {
  {
    std::lock_guard lock(status_mu_);
    destination_ = address;
  }
  accepted_ = true;  // before the dial is sent: the stream's reaction checks it on the answer
  configure_life();
  asio::post(ctx_, [self = shared_from_this(), s = std::move(socket),
                    address = std::move(address)]() mutable {
    self->socket_ = std::move(s);
    std::error_code ignored;
    self->socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
    self->stats_->dials.fetch_add(1, std::memory_order_relaxed);
    KONN_CONN_LOG((&self->logger()), debug, *self, "asking the server to dial {}",
                  address.empty() ? std::string("its destination") : address);
    Packet req = tunnel::make_dial_request(address, self->dial_id_);
    req.mutable_dialrequest()->set_konnhalfclose(self->settings_.half_close);
    if (!self->send_packet(std::move(req))) {
      self->life_.replace_reason("server stream closing");
      self->finish_close();
      return;
    }
    self->cancel_timer_.expires_after(kNodeDialBackstop);
    self->cancel_timer_.async_wait([weak = self->weak_from_this()](std::error_code ec) {
      auto me = weak.lock();
      if (ec || !me || me->state() != State::Dialing) return;
      me->stats_->dial_timeouts.fetch_add(1, std::memory_order_relaxed);
      KONN_CONN_LOG((&me->logger()), warn, *me, "no answer from the server within {}s",
                    kNodeDialBackstop.count());
      me->stop_dial("no answer from the server", true);
    });
  });
}

void EndpointConnection::dial_answered(int64_t connect_id, std::string error) {
  asio::post(ctx_, [self = shared_from_this(), connect_id, error = std::move(error)] {
    if (self->state() != State::Dialing) {
      // Closed while the server dialled, or a second answer: the server must forget the tunnel
      // it opened for us, and the table the id the stream registered for it (only that id).
      if (error.empty() && connect_id != 0 && connect_id != self->connect_id_) {
        self->table_->remove(std::numeric_limits<int64_t>::min(), connect_id, self.get());
        self->send_packet(tunnel::make_close_response(connect_id, "dialler gone"));
      }
      return;
    }
    if (!error.empty()) {
      self->stats_->dial_failures.fetch_add(1, std::memory_order_relaxed);
      KONN_CONN_LOG((&self->logger()), warn, *self, "dial failed at the server: {}", error);
      self->life_.replace_reason("dial failed: " + error);
      self->finish_close();
      return;
    }
    self->cancel_timer_.cancel();
    self->connect_id_ = connect_id;
    self->prefix_ = self->make_prefix();
    self->set_state(State::Established);
    self->stats_->observe_dial(std::chrono::steady_clock::now() - self->life_.started());
    self->stats_->open_endpoint_connections.fetch_add(1, std::memory_order_relaxed);
    self->read_next();
    self->write_next();  // DATA that arrived with the answer
  });
}

void EndpointConnection::peer_closed(std::string error) {
  asio::post(ctx_, [self = shared_from_this(), error = std::move(error)] {
    std::string reason = "closed by the peer" + (error.empty() ? "" : ": " + error);
    if (self->state() == State::Dialing) {
      self->stop_dial(reason, false);
      return;
    }
    self->close(reason, CloseFlags::Flush);
  });
}

void EndpointConnection::stop_dial(const std::string& reason, bool tell_peer) {
  if (!accepted_) {
    // The dial ends on its own thread: the coroutine's wait on cancel_timer_, or the connect's
    // wait on the socket, completes and finds the flag.
    dial_cancelled_ = true;
    cancel_timer_.cancel();
    std::error_code ignored;
    socket_.cancel(ignored);
    return;
  }
  if (tell_peer) send_packet(tunnel::make_close_dial(dial_id_));
  life_.replace_reason(reason);
  finish_close();
}

void EndpointConnection::configure_life() {
  tunnel::TunnelPolicy policy;
  policy.to_peer_high = static_cast<int64_t>(settings_.queue_high_watermark);
  policy.to_peer_low = static_cast<int64_t>(settings_.queue_high_watermark / 2);
  policy.flow_control = settings_.flow_control;
  policy.queue_cap = settings_.write_queue_cap;  // with flow control too
  policy.half_close = settings_.half_close;
  policy.half_close_timeout = settings_.half_close_timeout;
  std::weak_ptr<EndpointConnection> weak = weak_from_this();
  life_.configure(policy, ctx_.get_executor(), [weak] {
    auto self = weak.lock();
    if (!self || self->state() != State::Established) return;
    self->stats_->half_close_timeouts.fetch_add(1, std::memory_order_relaxed);
    std::string reason = "half-closed connection quiet for " +
                         core::config::format_go_duration(self->settings_.half_close_timeout) +
                         " (--half-close-timeout)";
    KONN_CONN_LOG((&self->logger()), info, *self, "closing: {}", reason);
    self->close(reason, CloseFlags::SendCloseResponse, reason);
  });
}

void EndpointConnection::deliver(Packet&& data) {
  auto direct = write_role_.deliver(data.data().data(), core::relay::kDirectWriteMax);
  if (direct.written > 0) written_to_socket(direct.written, true);
  if (!direct.post) return;
  // The worker writes the rest, and everything after it, in order.
  if (direct.written > 0) data.mutable_data()->mutable_data()->erase(0, direct.written);
  auto n = static_cast<int64_t>(tunnel::data_size(data));
  int64_t total = pending_writes_.fetch_add(n, std::memory_order_relaxed) + n;
  if (life_.over_cap(static_cast<size_t>(total))) {
    // The endpoint does not keep up and the server cannot be slowed down for this connection
    // alone: close it alone rather than stall the stream (STYLE head-of-line policy).
    pending_writes_.fetch_sub(n, std::memory_order_relaxed);
    write_role_.arrived();  // not posted: the connection is closed for it
    if (!overflowed_.exchange(true)) {
      asio::post(ctx_, [self = shared_from_this()] {
        if (self->state() == State::Closed) return;
        self->stats_->queue_overflow_closes.fetch_add(1, std::memory_order_relaxed);
        self->close("write queue over its cap", CloseFlags::SendCloseResponse,
                    "konn agent: endpoint write queue over " +
                        std::to_string(self->settings_.write_queue_cap) + " bytes");
      });
    }
    return;
  }
  asio::post(ctx_, [self = shared_from_this(), p = std::move(data)]() mutable {
    self->enqueue_write(std::move(p));
  });
}

void EndpointConnection::close_request() {
  asio::post(ctx_, [self = shared_from_this()] {
    self->close("CLOSE_REQ from server",
                CloseFlags::SendCloseResponse | CloseFlags::Flush | CloseFlags::Routine);
  });
}

void EndpointConnection::cancel_dial() {
  asio::post(ctx_, [self = shared_from_this()] {
    if (self->state() == State::Dialing) {
      self->stop_dial("dial cancelled by the peer", false);
      return;
    }
    self->close("DIAL_CLS from server", CloseFlags::SendCloseResponse);
  });
}

void EndpointConnection::close_write() {
  asio::post(ctx_, [self = shared_from_this()] {
    if (!self->settings_.half_close || self->state() != State::Established ||
        self->life_.finished(Side::Peer)) {
      return;
    }
    self->write_role_.close();  // no DATA comes after it; the socket's write side will shut
    self->one_side_finished(Side::Peer);
    if (self->life_.finished(Side::Local)) {
      self->close("both sides finished sending",
                  CloseFlags::SendCloseResponse | CloseFlags::Flush | CloseFlags::Routine);
      return;
    }
    self->maybe_shutdown_write();
  });
}

void EndpointConnection::endpoint_eof() {
  if (!settings_.half_close || life_.finished(Side::Peer)) {
    close("endpoint closed the connection",
          CloseFlags::SendCloseResponse | CloseFlags::Flush | CloseFlags::Routine);
    return;
  }
  one_side_finished(Side::Local);
  KONN_CONN_LOG((&logger()), debug, *this, "endpoint finished sending: half-close to the server");
  if (!send_packet(tunnel::make_close_write(connect_id_))) {
    close("server stream closing", CloseFlags::None);
  }
}

void EndpointConnection::maybe_shutdown_write() {
  if (!life_.finished(Side::Peer) || write_shut_ || writing_ || !writes_.empty()) return;
  if (state() != State::Established) return;
  write_shut_ = true;
  std::error_code ignored;
  socket_.shutdown(asio::socket_base::shutdown_send, ignored);
  KONN_CONN_LOG((&logger()), debug, *this, "server finished sending: endpoint write side shut");
}

void EndpointConnection::one_side_finished(Side side) {
  if (life_.one_side_finished(side)) {
    stats_->half_closed_endpoint_connections.fetch_add(1, std::memory_order_relaxed);
  }
}

void EndpointConnection::end_half_close() {
  if (life_.end_half_close()) {
    stats_->half_closed_endpoint_connections.fetch_sub(1, std::memory_order_relaxed);
  }
}

void EndpointConnection::add_credit(int64_t bytes) {
  if (bytes <= 0) return;
  asio::post(ctx_, [self = shared_from_this(), bytes] {
    if (self->life_.add_credit(bytes)) self->resume(PauseReason::NoCredit);
  });
}

void EndpointConnection::abandon() {
  asio::post(ctx_, [self = shared_from_this()] {
    // A node-side client learns that its tunnel broke from a reset, not from an EOF that could
    // pass for the end of a response.
    self->reset_ = self->settings_.node_direction;
    if (self->state() == State::Dialing) {
      self->stop_dial("server stream ended while dialing", false);
      return;
    }
    self->close("server stream ended", CloseFlags::None);
  });
}

void EndpointConnection::on_written(size_t data_bytes) {
  // Only a paused read loop needs its worker woken: a post per packet would cost a context
  // switch per packet (TunnelLife: a pause and the last write cannot miss each other).
  if (life_.left_for_peer(data_bytes)) {
    asio::post(ctx_, [self = shared_from_this()] { self->resume_if_drained(); });
  }
}

core::io::Awaitable<void> EndpointConnection::dial(std::string address) {
  auto self = shared_from_this();
  stats_->dials.fetch_add(1, std::memory_order_relaxed);
  KONN_CONN_LOG((&logger()), debug, *this, "dialing {}", address);
  core::net::AddressFilter allowed;
  if (settings_.destinations) {
    allowed = [policy = settings_.destinations](const asio::ip::tcp::endpoint& ep) {
      return policy->allows(ep.address(), ep.port());
    };
  }
  auto outcome = co_await (
      core::net::dial_tcp(ctx_.get_executor(), address, settings_.dial_timeout, allowed) ||
      cancel_timer_.async_wait(use_nothrow));
  if (outcome.index() == 1 || dial_cancelled_) {
    end_cancelled_dial();
    co_return;
  }
  auto& result = std::get<0>(outcome);
  if (!result.ec) socket_ = std::move(result.socket);
  dialled(result.ec, result.error_text);
}

void EndpointConnection::connect(const asio::ip::tcp::endpoint& to, std::string address) {
  stats_->dials.fetch_add(1, std::memory_order_relaxed);
  KONN_CONN_LOG((&logger()), debug, *this, "dialing {}", address);
  if (dial_cancelled_) {
    end_cancelled_dial();
    return;
  }
  if (settings_.destinations && !settings_.destinations->allows(to.address(), to.port())) {
    dialled(konn::Errc::DestinationNotAllowed,
            core::net::not_allowed_error_text(address, to.address().to_string()));
    return;
  }
  const std::error_code started = core::net::begin_connect(socket_, to);
  if (started != asio::error::in_progress) {
    dialled(started, started ? core::net::connect_error_text(address, started) : std::string());
    return;
  }
  // The dial's deadline, and DIAL_CLS (stop_dial): either one cancels the wait.
  cancel_timer_.expires_after(settings_.dial_timeout);
  cancel_timer_.async_wait([self = shared_from_this()](std::error_code ec) {
    if (ec || self->state() != State::Dialing) return;
    self->dial_timed_out_ = true;
    std::error_code ignored;
    self->socket_.cancel(ignored);
  });
  socket_.async_wait(
      asio::socket_base::wait_write,
      [self = shared_from_this(), address = std::move(address)](std::error_code wait_ec) {
        self->cancel_timer_.cancel();
        if (self->dial_cancelled_) {
          self->end_cancelled_dial();
          return;
        }
        if (self->dial_timed_out_) {
          self->dialled(konn::Errc::DialTimeout, core::net::timeout_error_text(address));
          return;
        }
        std::error_code ec = wait_ec ? wait_ec : core::net::end_connect(self->socket_);
        self->dialled(ec, ec ? core::net::connect_error_text(address, ec) : std::string());
      });
}

void EndpointConnection::end_cancelled_dial() {
  stats_->dials_cancelled.fetch_add(1, std::memory_order_relaxed);
  life_.replace_reason("dial cancelled (DIAL_CLS)");
  finish_close();
}

void EndpointConnection::dialled(std::error_code ec, const std::string& error_text) {
  if (ec == konn::Errc::DestinationNotAllowed) {
    stats_->dials_refused[EndpointStats::RefusedDestination].fetch_add(1,
                                                                       std::memory_order_relaxed);
    std::string error = error_text + " by the agent's --allowed-destinations";
    stats_->refused("destination", {}, error);
    KONN_CONN_LOG((&logger()), warn, *this, "dial refused: {}", error);
    send_packet(tunnel::make_dial_response(dial_id_, 0, error));
    life_.replace_reason("dial refused: destination not allowed");
    finish_close();
    return;
  }
  if (ec) {
    if (ec == konn::Errc::DialTimeout) {
      stats_->dial_timeouts.fetch_add(1, std::memory_order_relaxed);
    } else {
      stats_->dial_failures.fetch_add(1, std::memory_order_relaxed);
    }
    stats_->refused(ec == konn::Errc::DialTimeout ? "dial_timeout" : "dial_failed", {}, error_text);
    send_packet(tunnel::make_dial_response(dial_id_, 0, error_text));
    life_.replace_reason("dial failed: " + error_text);
    finish_close();
    return;
  }
  if (!table_->establish(dial_id_, connect_id_, this)) {
    life_.replace_reason("server stream ended while dialing");
    finish_close();
    return;
  }
  set_state(State::Established);
  stats_->observe_dial(std::chrono::steady_clock::now() - life_.started());
  stats_->open_endpoint_connections.fetch_add(1, std::memory_order_relaxed);
  Packet rsp = tunnel::make_dial_response(dial_id_, connect_id_);
  rsp.mutable_dialresponse()->set_konnhalfclose(settings_.half_close);
  if (!send_packet(std::move(rsp))) {
    close("server stream closing", CloseFlags::None);
    return;
  }
  read_next();
  write_next();  // DATA that raced ahead of us (none from a well-behaved server)
}

void EndpointConnection::read_next() {
  if (state() != State::Established) return;
  if (!gate_.open()) {  // resume() and close() cancel the wait
    gate_timer_.expires_at(asio::steady_timer::time_point::max());
    gate_timer_.async_wait([self = shared_from_this()](std::error_code) { self->read_next(); });
    return;
  }
  socket_.async_wait(asio::socket_base::wait_read,
                     [self = shared_from_this()](std::error_code ec) { self->read_ready(ec); });
}

void EndpointConnection::read_ready(std::error_code wait_ec) {
  if (state() != State::Established) return;
  if (wait_ec) {
    close("socket wait failed: " + wait_ec.message(), CloseFlags::SendCloseResponse,
          wait_ec.message());
    return;
  }
  // Memory is taken only now that bytes are there, and only as much as arrived (SocketReader).
  const size_t limit = life_.read_limit(tunnel::kReadChunk);
  if (limit == 0) {  // cannot happen while the gate is open; stay safe anyway
    life_.spend_credit(0);
    pause(PauseReason::NoCredit);
    read_next();
    return;
  }
  std::error_code ec;
  std::string buf = reader_.read(socket_.native_handle(), limit, ec);
  if (ec == asio::error::would_block) {
    read_next();
    return;
  }
  if (ec == asio::error::eof) {
    endpoint_eof();
    return;
  }
  if (ec) {
    close("read error: " + ec.message(), CloseFlags::SendCloseResponse, ec.message());
    return;
  }
  const size_t n = buf.size();
  life_.count_out(n);
  life_.touch();
  const bool queue_full = life_.queued_to_peer(n);
  const bool no_credit = life_.spend_credit(n);
  stats_->bytes_from_endpoints.fetch_add(n, std::memory_order_relaxed);
  if (!send_packet(tunnel::make_data(connect_id_, std::move(buf)), shared_from_this())) {
    close("server stream closing", CloseFlags::None);
    return;
  }
  if (queue_full) {
    pause(PauseReason::QueueFull);
    resume_if_drained();  // the stream may have drained before the flag was set
  }
  if (no_credit) pause(PauseReason::NoCredit);
  read_next();
}

void EndpointConnection::resume_if_drained() {
  if (!gate_.paused_for(PauseReason::QueueFull)) return;
  if (life_.resume_if_drained()) resume(PauseReason::QueueFull);
}

void EndpointConnection::written_to_socket(size_t n, bool return_credit) {
  life_.touch();
  life_.count_in(n);
  stats_->bytes_to_endpoints.fetch_add(n, std::memory_order_relaxed);
  if (!return_credit) return;
  // The worker and a direct write may both get here; the life hands the batch to one.
  int64_t bytes = life_.consumed(n);
  if (bytes > 0 && send_packet(tunnel::make_window_update(connect_id_, bytes))) {
    stats_->window_updates_sent.fetch_add(1, std::memory_order_relaxed);
  }
}

void EndpointConnection::pause(PauseReason reason) {
  if (gate_.pause(reason)) stats_->read_pauses.fetch_add(1, std::memory_order_relaxed);
}

void EndpointConnection::resume(PauseReason reason) {
  if (gate_.resume(reason)) {
    stats_->read_resumes.fetch_add(1, std::memory_order_relaxed);
    gate_timer_.cancel();
  }
}

void EndpointConnection::enqueue_write(Packet&& data) {
  write_role_.arrived();
  if (state() == State::Closed || (state() == State::Closing && !flushing_)) {
    pending_writes_.fetch_sub(static_cast<int64_t>(tunnel::data_size(data)),
                              std::memory_order_relaxed);
    return;
  }
  writes_.push_back(std::move(data));
  write_next();
}

void EndpointConnection::write_next() {
  if (writing_) return;
  if (state() == State::Dialing || state() == State::Closed) return;
  if (writes_.empty()) {
    if (state() == State::Closing) finish_close();
    maybe_shutdown_write();
    if (state() == State::Established && !life_.finished(Side::Peer)) {
      // Nothing queued or in flight: small packets may go straight to the socket (unless one
      // is still on its way here; this is called again once it is written).
      write_role_.open(socket_.native_handle());
    }
    return;
  }
  write_buffers_.clear();
  write_count_ = std::min(writes_.size(), kMaxGather);
  for (size_t i = 0; i < write_count_; ++i) {
    // Straight from the packet's own string: no copy. The packets stay in writes_ (a deque
    // keeps elements in place on push_back) until the write completes.
    write_buffers_.push_back(asio::buffer(writes_[i].data().data()));
  }
  writing_ = true;
  asio::async_write(socket_, write_buffers_,
                    [self = shared_from_this()](std::error_code ec, size_t n) {
                      self->on_socket_written(ec, n);
                    });
}

void EndpointConnection::on_socket_written(std::error_code ec, size_t n) {
  writing_ = false;
  size_t queued = 0;
  for (size_t i = 0; i < write_count_; ++i) {
    queued += writes_.front().data().data().size();
    writes_.pop_front();
  }
  write_count_ = 0;
  pending_writes_.fetch_sub(static_cast<int64_t>(queued), std::memory_order_relaxed);
  written_to_socket(n, state() == State::Established);
  if (state() == State::Closed) return;
  if (ec) {
    if (state() == State::Closing) {
      finish_close();
    } else {
      close("write error: " + ec.message(), CloseFlags::SendCloseResponse, ec.message());
    }
    return;
  }
  write_next();
}

void EndpointConnection::close(const std::string& reason, CloseFlags flags,
                               const std::string& error) {
  if (state() == State::Closing || state() == State::Closed) return;
  if (state() == State::Dialing) {  // nothing to flush and no DIAL_RSP yet: just stop the dial
    stop_dial(reason, true);
    return;
  }
  write_role_.close();
  life_.replace_reason(reason);
  routine_close_ = has(flags, CloseFlags::Routine);
  set_state(State::Closing);
  stats_->open_endpoint_connections.fetch_sub(1, std::memory_order_relaxed);
  end_half_close();
  // Stop reading: the read loop checks the state when its wait ends (at the latest when
  // finish_close() closes the socket). The socket is not cancelled: that would abort the flush.
  gate_timer_.cancel();
  if (has(flags, CloseFlags::SendCloseResponse)) {
    // Queued after every DATA this connection sent, so the server sees them first.
    send_packet(tunnel::make_close_response(connect_id_, error));
  }
  flushing_ = has(flags, CloseFlags::Flush);
  if (!flushing_ || (!writing_ && writes_.empty())) {
    finish_close();
    return;
  }
  flush_timer_.expires_after(settings_.close_flush_timeout);
  flush_timer_.async_wait([self = shared_from_this()](std::error_code ec) {
    if (!ec && self->state() != State::Closed) {
      self->life_.append_reason(" (flush timed out)");
      self->routine_close_ = false;
      self->finish_close();
    }
  });
  write_next();
}

void EndpointConnection::finish_close() {
  if (state() == State::Closed) return;
  set_state(State::Closed);
  write_role_.close();  // before the descriptor can be closed and reused
  end_half_close();
  std::error_code ignored;
  if (reset_) socket_.set_option(asio::socket_base::linger(true, 0), ignored);  // close() sends RST
  socket_.close(ignored);  // otherwise a FIN, as a shutdown(2) first would send
  flush_timer_.cancel();
  gate_timer_.cancel();
  cancel_timer_.cancel();
  // An in-flight write still points into the front packets; its completion releases them.
  size_t keep = writing_ ? write_count_ : 0;
  while (writes_.size() > keep) {
    pending_writes_.fetch_sub(static_cast<int64_t>(writes_.back().data().data().size()),
                              std::memory_order_relaxed);
    writes_.pop_back();
  }
  table_->remove(dial_id_, connect_id_, this);
  const int64_t ms = life_.duration_ms();
  // An ordinary end of a forward tunnel is a debug line, as the server's are: at info it would be
  // a write(2) per dial and most of a busy agent's log. Errors, caps and cancelled dials stay at
  // info, and so does every node-to-control-plane tunnel (node.tunnel, far fewer).
  const auto level =
      routine_close_ && !settings_.node_direction ? spdlog::level::debug : spdlog::level::info;
  if (logger().should_log(level)) {
    logger().log(level, "{}closed: {}; bytes endpoint->server={} server->endpoint={} duration={}ms",
                 log_prefix(), life_.reason(), life_.bytes_out(), life_.bytes_in(), ms);
  }
}

void EndpointConnection::set_state(State s) {
  life_.to(s, logger(), [this]() -> const std::string& { return log_prefix(); });
}

}  // namespace konn::core::endpoint
