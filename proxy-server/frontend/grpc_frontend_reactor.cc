#include "proxy-server/frontend/grpc_frontend_reactor.h"

#include "core/config/duration.h"
#include "core/log/log_macros.h"
#include "core/net/endpoint.h"
#include "core/tunnel/packet.h"
#include "proxy-server/backend/backend.h"
#include "proxy-server/tunnel/router.h"

namespace konn::server {

using core::relay::PauseReason;
using core::tunnel::describe;
using core::tunnel::make_close_dial;
using core::tunnel::make_close_request;
using core::tunnel::make_close_response;
using core::tunnel::make_close_write;
using core::tunnel::make_dial_response;
using core::tunnel::make_window_update;
using core::tunnel::to_string;

namespace {
// Looked up once: the registry's lookup takes two locks, too much for every tunnel.
const std::shared_ptr<spdlog::logger>& frontend_logger() {
  static const std::shared_ptr<spdlog::logger> log = core::log::get("server.frontend");
  return log;
}
}  // namespace

GrpcFrontend::GrpcFrontend(Router& router) : router_(router), log_(frontend_logger()) {
  to_agent_listener_.owner = this;
  to_client_listener_.owner = this;
}

GrpcFrontend::~GrpcFrontend() { cancel_timer(); }

void GrpcFrontend::serve(asio::io_context& home, const std::shared_ptr<core::h2::Stream>& stream,
                         const core::h2::PeerInfo& peer, Router& router) {
  std::shared_ptr<GrpcFrontend> f(new GrpcFrontend(router));
  f->self_ = f;
  f->peer_ = peer.address;
  f->attach(home, stream);
  f->begin();
}

void GrpcFrontend::begin() {
  router_.metrics().grpc_proxy.Increment();
  if (!router_.acquire_frontend(peer_)) {
    close({core::h2::grpc_code::kResourceExhausted,
           "too many frontend streams (limit " +
               std::to_string(router_.options().max_frontend_streams) +
               ", --max-frontend-streams)"});
    return;
  }
  has_slot_ = true;
  KONN_LOG(log_, debug, "frontend stream opened peer={}", peer_);
  // A stream must dial soon: an idle one would hold its slot for nothing.
  arm_timer(router_.options().dial_request_timeout, &GrpcFrontend::on_dial_request_timeout);
  start_reading();
}

std::shared_ptr<GrpcFrontend> GrpcFrontend::self_ptr() {
  return std::static_pointer_cast<GrpcFrontend>(shared_from_this());
}

TunnelStatus GrpcFrontend::status() const {
  std::lock_guard lock(mu_);
  return {
      "grpc", address_, life_.started(), life_.bytes_out(), life_.bytes_in(), life_.half_counted()};
}

std::string GrpcFrontend::log_prefix() const {
  std::lock_guard lock(mu_);
  return prefix_locked();
}

std::string GrpcFrontend::prefix_locked() const {
  return "[C" + std::to_string(connect_id_) + " D" + std::to_string(random_) + " A" + agent_id_ +
         "] ";
}

void GrpcFrontend::set_state_locked(State s) {
  life_.to(s, *log_, [this] { return prefix_locked(); });
}

void GrpcFrontend::set_reason(const std::string& reason) {
  std::lock_guard lock(mu_);
  life_.set_reason(reason);
}

void GrpcFrontend::on_queued(const Packet& p) {
  router_.metrics().packet(ServerMetrics::ToClient, p.type());
}

void GrpcFrontend::on_packet(Packet&& p) {
  router_.metrics().packet(ServerMetrics::FromClient, p.type());
  switch (p.type()) {
    case DIAL_REQ:
      on_dial_request(std::move(p));
      return;
    case DATA:
      on_client_data(std::move(p));
      return;
    case CLOSE_REQ:
      on_close_request(p);
      return;
    case KONN_CLOSE_WRITE:
      on_client_close_write(p);
      return;
    case DIAL_CLS:
      on_dial_close(p);
      return;
    default:
      KONN_CONN_LOG(log_, debug, *this, "unexpected packet from frontend ignored: {}", describe(p));
      return;
  }
}

void GrpcFrontend::on_dial_request(Packet&& p) {
  const auto& req = p.dialrequest();
  int64_t random = req.random();
  {
    std::lock_guard lock(mu_);
    if (state_locked() != State::Idle) {
      KONN_LOG(log_, warn, "[D{}] second DIAL_REQ on one frontend stream ignored (state {})",
               random, to_string(state_locked()));
      return;
    }
    set_state_locked(State::Dialing);
    random_ = random;
    address_ = req.address();
    dial_started_ = std::chrono::steady_clock::now();
  }
  if (!p.has_dialrequest()) {  // refused here rather than forwarded for the agent to refuse
    fail_dial(random, "DIAL_REQ without a dial request");
    return;
  }
  auto hp = core::net::parse_host_port(req.address());
  std::string host = hp ? hp->host : req.address();
  auto backend = router_.backends().pick(host);
  if (!backend) {
    router_.dial_failed("no_agent", nullptr, req.address(), "No agent available");
    fail_dial(random, "No agent available");
    return;
  }
  if (auto refused = router_.add_pending(random, self_ptr(), *backend)) {
    fail_dial(random, refused->error);
    return;
  }
  {
    std::lock_guard lock(mu_);
    backend_ = backend;
    agent_id_ = backend->agent_id();
    const bool flow = backend->flow_control();
    if (!flow) backlog_.bind(backend, self_ptr());
    // Half-close passes through only when both ends understand it.
    half_close_ = req.konnhalfclose() && backend->half_close();
    std::weak_ptr<GrpcFrontend> weak = self_ptr();
    life_.configure(frontend_tunnel_policy(router_.options(), flow, half_close_),
                    router_.timers().get_executor(), [weak] {
                      if (auto self = weak.lock()) self->on_quiet();
                    });
  }
  p.mutable_dialrequest()->set_konnhalfclose(half_close_);
  KONN_CONN_LOG(log_, debug, *this, "dialing {} through agent {}", req.address(),
                backend->agent_id());
  if (router_.options().backend_dial_timeout.count() > 0) {
    arm_timer(router_.options().backend_dial_timeout, &GrpcFrontend::on_dial_timeout);
  }
  if (!backend->send(std::move(p)) && router_.pending().take(random)) {
    fail_dial(random, "agent disconnected before the dial was sent");
  }
}

void GrpcFrontend::fail_dial(int64_t random, const std::string& error) {
  {
    std::lock_guard lock(mu_);
    set_state_locked(State::Closed);
    life_.set_reason("dial failed: " + error);
    cancel_timer();
  }
  KONN_CONN_LOG(log_, info, *this, "dial to {} failed: {}", address_, error);
  send(make_dial_response(random, 0, error));
  close();
}

bool GrpcFrontend::deliver_dial_response(Packet&& p) {
  const auto& rsp = p.dialresponse();
  bool failed = !rsp.error().empty();
  {
    std::lock_guard lock(mu_);
    if (state_locked() != State::Dialing || rsp.random() != random_) return false;
    cancel_timer();
    if (failed) {
      set_state_locked(State::Closed);
      life_.replace_reason("dial failed: " + rsp.error());
    } else {
      set_state_locked(State::Established);
      connect_id_ = rsp.connectid();
      established_at_ = std::chrono::steady_clock::now();
      router_.metrics().dial_duration.Observe(
          std::chrono::duration<double>(established_at_ - dial_started_).count());
      router_.metrics().established.Increment();
    }
  }
  if (failed) {
    KONN_CONN_LOG(log_, info, *this, "dial to {} failed at the agent: {}", address_, rsp.error());
    send(std::move(p));
    close();
  } else {
    KONN_CONN_LOG(log_, debug, *this, "tunnel established to {}", address_);
    send(std::move(p));
  }
  return true;
}

void GrpcFrontend::on_client_data(Packet&& p) {
  std::shared_ptr<Backend> backend;
  auto bytes = static_cast<int64_t>(p.data().data().size());
  {
    std::lock_guard lock(mu_);
    if (state_locked() != State::Established || p.data().connectid() != connect_id_) {
      KONN_LOG(log_, debug, "[C{} D{}] DATA from frontend dropped (state {}, tunnel C{})",
               p.data().connectid(), random_, to_string(state_locked()), connect_id_);
      return;
    }
    backend = backend_;
    life_.touch();
    // Pausing is idempotent and never starts a read, so it is safe under mu_; resuming is not.
    if (life_.queued_to_peer(static_cast<size_t>(bytes))) {
      router_.metrics().reads_paused_total.Add({{"reason", "queue_full"}}).Increment();
      pause_reading(PauseReason::QueueFull);
    }
    if (life_.spend_credit(static_cast<size_t>(bytes))) {
      router_.metrics().reads_paused_total.Add({{"reason", "no_credit"}}).Increment();
      pause_reading(PauseReason::NoCredit);
    }
  }
  life_.count_out(static_cast<size_t>(bytes));
  router_.metrics().bytes_to_agent.Increment(static_cast<double>(bytes));
  // The aliasing shared_ptr keeps this frontend alive while its bytes sit in the backend queue.
  std::shared_ptr<core::tunnel::WriteListener> listener(self_ptr(), &to_agent_listener_);
  backend->send(std::move(p), std::move(listener));
}

void GrpcFrontend::on_client_close_write(const Packet& p) {
  std::shared_ptr<Backend> backend;
  {
    std::lock_guard lock(mu_);
    if (state_locked() != State::Established || !half_close_ ||
        p.closewrite().connectid() != connect_id_) {
      KONN_LOG(log_, debug, "[C{} D{}] KONN_CLOSE_WRITE from frontend ignored (state {})",
               p.closewrite().connectid(), random_, to_string(state_locked()));
      return;
    }
    backend = backend_;
    one_side_finished_locked(Side::Local);
  }
  // Queued behind the client's DATA, so the agent writes those first.
  backend->send(make_close_write(p.closewrite().connectid()));
}

void GrpcFrontend::deliver_close_write(Packet&& p) {
  {
    std::lock_guard lock(mu_);
    if (!half_close_ || (state_locked() != State::Established && state_locked() != State::Closing))
      return;
    one_side_finished_locked(Side::Peer);
  }
  send(std::move(p));
}

void GrpcFrontend::one_side_finished_locked(Side side) {
  if (life_.one_side_finished(side)) router_.metrics().half_closed.Increment();
}

void GrpcFrontend::on_quiet() {
  std::shared_ptr<Backend> backend;
  int64_t id = 0;
  std::string reason;
  {
    std::lock_guard lock(mu_);
    if (state_locked() != State::Established) return;
    set_state_locked(State::Closed);
    bool half = life_.half_closed();
    router_.metrics().tunnel_timeout(half ? "half_close" : "idle");
    reason = router_.options().quiet_reason(half);
    life_.set_reason(reason);
    backend = backend_;
    id = connect_id_;
  }
  KONN_CONN_LOG(log_, info, *this, "closing: {}", reason);
  // As an agent's close: the agent is told, the client gets CLOSE_RSP with the reason.
  backend->forget_connection(id);
  backend->send(make_close_request(id));
  send(make_close_response(id, reason));
  close();
}

void GrpcFrontend::on_sent_to_agent(size_t bytes) {
  bool resume = false;
  {
    std::lock_guard lock(mu_);
    life_.left_for_peer(bytes);
    resume = life_.resume_if_drained();
  }
  if (resume) resume_reading(PauseReason::QueueFull);
}

void GrpcFrontend::deliver_window_update(int64_t bytes) {
  bool resume = false;
  {
    std::lock_guard lock(mu_);
    resume = life_.add_credit(bytes);
  }
  if (resume) resume_reading(PauseReason::NoCredit);
}

void GrpcFrontend::deliver_data(Packet&& p) {
  bool flow = false;
  {
    std::lock_guard lock(mu_);
    if (!life_.open()) return;
    flow = life_.policy().flow_control;
    life_.touch();
  }
  size_t bytes = p.data().data().size();
  if (life_.over_cap(queued_bytes() + bytes)) {
    KONN_CONN_LOG(log_, warn, *this,
                  "closing tunnel: the client stopped reading and {} bytes wait (cap {}); other "
                  "tunnels of the agent are unaffected",
                  queued_bytes() + bytes, router_.options().tunnel_queue_cap_bytes());
    close_unread("client not reading: tunnel queue over its cap");
    return;
  }
  if (!flow) backlog_.added(bytes);
  life_.count_in(bytes);
  router_.metrics().bytes_to_client.Increment(static_cast<double>(bytes));
  std::shared_ptr<core::tunnel::WriteListener> listener(self_ptr(), &to_client_listener_);
  send(std::move(p), std::move(listener));
}

void GrpcFrontend::on_sent_to_client(size_t bytes) {
  std::shared_ptr<Backend> backend;
  int64_t credit = 0;
  int64_t id = 0;
  {
    std::lock_guard lock(mu_);
    if (!life_.policy().flow_control) {
      backlog_.taken(bytes);
      return;
    }
    credit = life_.consumed(bytes);
    if (credit == 0) return;
    backend = backend_;
    id = connect_id_;
  }
  if (backend) backend->send(make_window_update(id, credit));
}

void GrpcFrontend::close_unread(const std::string& reason) {
  std::shared_ptr<Backend> backend;
  int64_t id = 0;
  {
    std::lock_guard lock(mu_);
    if (life_.open()) {
      backend = backend_;
      id = connect_id_;
    }
    // Closed already (the agent closed it) but its last bytes still wait for the client: the
    // stream is aborted all the same.
    set_state_locked(State::Closed);
    life_.replace_reason(reason);
  }
  router_.metrics().tunnels_over_cap_total.Add({}).Increment();
  if (backend) {
    backend->forget_connection(id);
    backend->send(make_close_request(id));
  }
  close({core::h2::grpc_code::kResourceExhausted, reason}, true);
  // What waited is dropped: the agent's stream need not wait for it any longer.
  backlog_.release();
}

void GrpcFrontend::close_stalled(std::chrono::steady_clock::duration bound) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(bound).count();
  close_unread(fmt::format("client took nothing for {} ms (--stalled-client-timeout)", ms));
}

void GrpcFrontend::on_close_request(const Packet& p) {
  std::shared_ptr<Backend> backend;
  int64_t id = 0;
  State state;
  {
    std::lock_guard lock(mu_);
    state = state_locked();
    backend = backend_;
    id = connect_id_;
    if (state_locked() == State::Established) {
      set_state_locked(State::Closing);
      life_.set_reason("closed by frontend");
    }
  }
  if (state == State::Established) {
    backend->send(make_close_request(id));
    arm_timer(kCloseWait, &GrpcFrontend::on_close_timeout);
  } else if (state == State::Dialing) {
    Packet cls = make_close_dial(random_);
    on_dial_close(cls);
  } else if (state != State::Closing) {
    send(make_close_response(p.closerequest().connectid(), "Unknown connectID"));
    close();
  }
}

void GrpcFrontend::on_dial_close(const Packet& p) {
  std::shared_ptr<Backend> backend;
  int64_t random = 0;
  std::string address;
  {
    std::lock_guard lock(mu_);
    if (state_locked() != State::Dialing || p.closedial().random() != random_) return;
    set_state_locked(State::Closed);
    life_.replace_reason("dial cancelled by frontend");
    cancel_timer();
    backend = backend_;
    random = random_;
    address = address_;
  }
  // Unlike upstream, the agent hears about it and can abandon the dial.
  if (router_.pending().take(random)) {
    router_.dial_failed("frontend_close", backend.get(), address, "dial cancelled by frontend");
    backend->send(make_close_dial(random));
  }
  close();
}

void GrpcFrontend::deliver_close(Packet&& p) {
  {
    std::lock_guard lock(mu_);
    if (state_locked() == State::Closed) return;
    set_state_locked(State::Closed);
    cancel_timer();
    life_.set_reason(p.type() == DIAL_CLS ? "dial closed by agent" : "closed by agent");
  }
  // CLOSE_RSP and the status in one write.
  with_writes_held([&] {
    send(std::move(p));
    close();
  });
}

void GrpcFrontend::backend_gone() {
  State prev;
  int64_t random = 0;
  int64_t id = 0;
  {
    std::lock_guard lock(mu_);
    prev = state_locked();
    set_state_locked(State::Closed);
    cancel_timer();
    random = random_;
    id = connect_id_;
    life_.set_reason("agent disconnected");
  }
  if (prev == State::Dialing) {
    send(make_dial_response(random, 0, "agent disconnected before answering the dial"));
  } else if (prev == State::Established || prev == State::Closing) {
    send(make_close_response(id));
  } else {
    return;
  }
  close();
}

void GrpcFrontend::on_read_end() {
  State prev;
  std::shared_ptr<Backend> backend;
  int64_t random = 0;
  int64_t id = 0;
  std::string address;
  {
    std::lock_guard lock(mu_);
    prev = state_locked();
    backend = backend_;
    random = random_;
    address = address_;
    id = connect_id_;
    if (state_locked() == State::Established) {
      // Ask the agent to close and forward its CLOSE_RSP if the client still listens.
      set_state_locked(State::Closing);
    } else if (state_locked() != State::Closing) {
      set_state_locked(State::Closed);
      cancel_timer();
    }
    life_.set_reason("frontend stream ended");
  }
  switch (prev) {
    case State::Dialing:
      if (router_.pending().take(random)) {
        router_.dial_failed("frontend_close", backend.get(), address, "frontend stream ended");
        backend->send(make_close_dial(random));
      }
      close();
      return;
    case State::Established:
      backend->send(make_close_request(id));
      arm_timer(kCloseWait, &GrpcFrontend::on_close_timeout);
      return;
    case State::Closing:
      return;  // CLOSE_RSP (or the close timer) finishes the stream
    default:
      close();
      return;
  }
}

void GrpcFrontend::arm_timer(std::chrono::nanoseconds delay, void (GrpcFrontend::*fn)()) {
  std::weak_ptr<GrpcFrontend> weak = self_ptr();
  std::lock_guard lock(mu_);
  cancel_timer();
  timer_ = router_.deadlines().arm(
      std::chrono::duration_cast<core::tunnel::Deadlines::Clock::duration>(delay), [weak, fn] {
        if (auto self = weak.lock()) ((*self).*fn)();
      });
}

void GrpcFrontend::cancel_timer() {
  router_.deadlines().cancel(timer_);
  timer_ = 0;
}

void GrpcFrontend::on_dial_timeout() {
  int64_t random = 0;
  std::shared_ptr<Backend> backend;
  std::string address;
  {
    std::lock_guard lock(mu_);
    if (state_locked() != State::Dialing) return;
    random = random_;
    backend = backend_;
    address = address_;
  }
  if (!router_.pending().take(random)) return;  // the answer won the race
  router_.dial_failed("backend_dial_timeout", backend.get(), address, "Backend dial timeout");
  backend->send(make_close_dial(random));
  fail_dial(random, "Backend dial timeout");
}

void GrpcFrontend::on_dial_request_timeout() {
  {
    std::lock_guard lock(mu_);
    if (state_locked() != State::Idle) return;
    set_state_locked(State::Closed);
    life_.replace_reason("no DIAL_REQ in time");
  }
  router_.metrics().limit_hit("dial_request_timeout");
  KONN_LOG(log_, info,
           "frontend stream from {} closed: no DIAL_REQ within {} "
           "(--dial-request-timeout)",
           peer_, core::config::format_go_duration(router_.options().dial_request_timeout));
  close({core::h2::grpc_code::kDeadlineExceeded,
         "no DIAL_REQ within " +
             core::config::format_go_duration(router_.options().dial_request_timeout)});
}

void GrpcFrontend::on_close_timeout() {
  std::shared_ptr<Backend> backend;
  int64_t id = 0;
  {
    std::lock_guard lock(mu_);
    if (state_locked() != State::Closing) return;
    set_state_locked(State::Closed);
    backend = backend_;
    id = connect_id_;
    life_.append_reason(" (agent did not answer CLOSE_REQ)");
  }
  backend->forget_connection(id);
  send(make_close_response(id, "agent did not answer the close request"));
  close();
}

void GrpcFrontend::OnDone() {
  mark_done();
  if (!cancelled_by_us_) {
    router_.metrics().call_errors(ServerMetrics::FromClient, ServerMetrics::ToClient,
                                  peer_cancelled(), failed_write_type_);
  }
  // After the errors are counted: whoever sees the gauge drop sees them too.
  router_.metrics().grpc_proxy.Decrement();
  if (has_slot_) router_.release_frontend();
  backlog_.release();
  {
    std::lock_guard lock(mu_);
    cancel_timer();
    router_.metrics().tunnel_ended(life_.end_half_close(), life_.ever_established(),
                                   established_at_);
  }
  KONN_CONN_LOG(log_, debug, *this,
                "tunnel closed: {} address={} from_client={}B to_client={}B "
                "duration={}ms",
                life_.reason(), address_, life_.bytes_out(), life_.bytes_in(), life_.duration_ms());
  auto keep = std::move(self_);  // destroyed last, possibly with this
}

}  // namespace konn::server
