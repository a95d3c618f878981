#include "core/konnectivity/grpc_tunnel.h"

#include <deque>
#include <limits>
#include <mutex>
#include <random>

#include <asio/steady_timer.hpp>

#include "core/log/log_macros.h"

namespace konn::core::konnectivity {
namespace {

const std::shared_ptr<spdlog::logger>& tunnel_logger() {
  static auto log = core::log::get("konnectivity");
  return log;
}

// konnectivity-client draws the dial id with math/rand Int63(): non-negative. Zero is avoided so
// that a missing field on the wire never looks like our dial.
int64_t random_dial_id() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> dist(1, std::numeric_limits<int64_t>::max());
  std::lock_guard lock(mu);
  return dist(rng);
}

std::string status_text(const h2::GrpcStatus& s) {
  std::string out = "code " + std::to_string(s.code);
  if (!s.message.empty()) out += ": " + s.message;
  return out;
}

}  // namespace

// The tunnel's state, all of it on `ex_`, the thread of the call's connection: the call's
// callbacks run there inline, and so do the tunnel's operations. Owned by the GrpcTunnel, by the
// call's callbacks until the call ended (every path ends it: the proxy-server's status, our
// cancel when it does not come within kCloseWait, or the connection's close), and by handlers in
// flight, so it outlives whichever of them ends first.
class GrpcTunnel::Core final : public std::enable_shared_from_this<GrpcTunnel::Core> {
 public:
  enum class State {
    Dialing,      // DIAL_REQ sent, no DIAL_RSP yet
    Established,  // DIAL_RSP without error: DATA flows
    Closing,      // we sent CLOSE_REQ and wait for CLOSE_RSP (or the call's end)
    Closed,       // ended: CLOSE_RSP, DIAL_CLS, a failed dial, or the call's end
  };

  Core(asio::any_io_executor ex, int64_t dial_id)
      : ex_(std::move(ex)), timer_(ex_), close_timer_(ex_), dial_id_(dial_id) {}

  h2::StreamCallbacks callbacks() {
    h2::StreamCallbacks cb;
    cb.on_message = [self = shared_from_this()](std::string&& m) {
      self->on_message(std::move(m));
    };
    cb.on_end = [self = shared_from_this()](const h2::GrpcStatus& status, const h2::Metadata&) {
      self->handle_stream_end(status);
    };
    return cb;
  }

  // The call has started: its queue tells when HTTP/2 took what a waiting write queued.
  void attach(std::shared_ptr<h2::Stream> stream) {
    stream_ = std::move(stream);
    stream_->set_on_drained([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->write_done_.complete({}, self->write_len_);
    });
  }

  void on_message(std::string&& message) {
    Packet p;
    if (!p.ParseFromString(message)) {
      // Not a Packet: nothing more from this proxy-server can be trusted on this call.
      protocol_error_ = "a message from the proxy-server is not a Packet";
      stream_->cancel();
      return;
    }
    handle_packet(std::move(p));
  }

  void handle_packet(Packet&& p) {
    switch (p.type()) {
      case DIAL_RSP: {
        const auto& r = p.dialresponse();
        if (state_ != State::Dialing || r.random() != dial_id_) return;
        answered_ = true;
        if (!r.error().empty()) {
          dial_error_ = DialError{classify(r.error()), r.error(), 0};
          set_state(State::Closed, r.error());
          end_call();
        } else {
          connect_id_ = r.connectid();
          half_close_ = r.konnhalfclose();
          set_state(State::Established, "");
        }
        timer_.cancel();
        return;
      }
      case DATA: {
        const bool mine = (state_ == State::Established || state_ == State::Closing) &&
                          p.data().connectid() == connect_id_ && !in_eof_ && !user_closed_;
        if (!mine || p.data().data().empty()) return;
        inbox_bytes_ += p.data().data().size();
        inbox_.push_back(std::move(*p.mutable_data()->mutable_data()));
        if (inbox_bytes_ >= kInboxHigh && !paused_) {
          paused_ = true;
          stream_->pause_reading();
        }
        serve_read();
        return;
      }
      case CLOSE_RSP:
        if (p.closeresponse().connectid() != connect_id_ || connect_id_ == 0) return;
        remote_closed(p.closeresponse().error());
        return;
      case DIAL_CLS:
        if (state_ == State::Dialing && p.closedial().random() == dial_id_) {
          answered_ = true;
          dial_error_ =
              DialError{DialFailure::Other, "dial closed by the proxy-server (DIAL_CLS)", 0};
          set_state(State::Closed, dial_error_.text);
          end_call();
          timer_.cancel();
        } else if (state_ == State::Established || state_ == State::Closing) {
          remote_closed("dial closed by the proxy-server (DIAL_CLS)");
        }
        return;
      case KONN_CLOSE_WRITE:
        if (p.closewrite().connectid() != connect_id_ || connect_id_ == 0) return;
        in_eof_ = true;
        serve_read();
        return;
      default:
        return;  // nothing else is meant for a frontend client; ignored as konnectivity-client does
    }
  }

  void handle_stream_end(const h2::GrpcStatus& status) {
    stream_done_ = true;
    close_timer_.cancel();
    std::string how = status_text(status);
    if (!protocol_error_.empty()) how = protocol_error_ + " (" + how + ")";
    if (state_ == State::Dialing) {
      answered_ = true;
      dial_error_ =
          DialError{protocol_error_.empty() && !status.ok() ? classify_stream_error(status)
                                                            : DialFailure::ProxyUnavailable,
                    "proxy-server stream ended before DIAL_RSP: " + how, 0};
      set_state(State::Closed, dial_error_.text);
      timer_.cancel();
      return;
    }
    if (state_ != State::Closed) {
      if (state_ == State::Established && !in_eof_) in_error_ = asio::error::connection_reset;
      set_state(State::Closed, "proxy-server stream ended: " + how);
    }
    timer_.cancel();
    serve_read();
    write_done_.complete(asio::error::broken_pipe, 0);
  }

  static DialFailure classify_stream_error(const h2::GrpcStatus& s) {
    if (s.code == h2::grpc_code::kUnavailable) return DialFailure::ProxyUnavailable;
    if (s.code == h2::grpc_code::kDeadlineExceeded) return DialFailure::Timeout;
    DialFailure f = classify(s.message);
    return f == DialFailure::Other ? DialFailure::ProxyUnavailable : f;
  }

  // The far side ended the tunnel (CLOSE_RSP or DIAL_CLS): what was received is still read, then
  // EOF; writes fail.
  void remote_closed(const std::string& error) {
    in_eof_ = true;
    out_closed_ = true;
    if (!error.empty()) end_reason_ = error;
    set_state(State::Closed, error);
    end_call();
    timer_.cancel();
    serve_read();
    write_done_.complete(asio::error::broken_pipe, 0);
  }

  void set_state(State s, const std::string& why) {
    if (state_ == s) return;
    KONN_LOG(tunnel_logger(), debug, "[D{} C{}] {} -> {}{}{}", dial_id_, connect_id_,
             to_string(state_), to_string(s), why.empty() ? "" : ": ", why);
    state_ = s;
    if (s == State::Closed && end_reason_.empty()) end_reason_ = why;
  }

  static const char* to_string(State s) {
    switch (s) {
      case State::Dialing:
        return "Dialing";
      case State::Established:
        return "Established";
      case State::Closing:
        return "Closing";
      case State::Closed:
        return "Closed";
    }
    return "?";
  }

  // Sends one packet on the call; false when the call can no longer send.
  bool send(const Packet& p) {
    if (!stream_ || stream_->ended()) return false;
    return stream_->send_framed(tunnel::frame_packet(p).head);
  }

  // Our side of the call is done (half-close: END_STREAM after what is queued). The proxy-server
  // ends the call then; should it not within kCloseWait, the call is cancelled.
  void end_call() {
    if (!stream_ || stream_->ended() || call_ended_by_us_) return;
    call_ended_by_us_ = true;
    stream_->half_close();
    arm_close_timer("the proxy-server did not end the call");
  }

  void arm_close_timer(const char* why) {
    close_timer_.expires_after(kCloseWait);
    close_timer_.async_wait([self = shared_from_this(), why](std::error_code ec) {
      if (ec || self->stream_done_) return;
      KONN_LOG(tunnel_logger(), debug, "[D{} C{}] {} within {}s: cancelling it", self->dial_id_,
               self->connect_id_, why, kCloseWait.count());
      self->set_state(State::Closed, std::string(why) + " within 10s");
      self->stream_->cancel();
    });
  }

  // The reader took `n` bytes, or they were dropped.
  void consumed(size_t n) { inbox_bytes_ -= std::min(inbox_bytes_, n); }

  // Resumes the call's reading once the inbox fell below the low watermark. Never while a read
  // is being served: resuming delivers what waited, inline.
  void maybe_resume() {
    if (!paused_ || inbox_bytes_ >= kInboxLow || !stream_) return;
    paused_ = false;
    stream_->resume_reading();
  }

  // Completes the pending read when there is something to report.
  void serve_read() {
    if (!read_done_) return;
    if (!inbox_.empty()) {
      size_t n = take(read_buf_);
      read_done_.complete({}, n);
      maybe_resume();
    } else if (in_error_) {
      read_done_.complete(in_error_, 0);
    } else if (in_eof_ || state_ == State::Closed) {
      read_done_.complete(asio::error::eof, 0);
    }
  }

  // Copies inbox bytes into `buf`; returns how many.
  size_t take(asio::mutable_buffer buf) {
    size_t total = 0;
    while (!inbox_.empty() && buf.size() > 0) {
      std::string& front = inbox_.front();
      size_t n = asio::buffer_copy(buf, asio::buffer(front) + front_off_);
      front_off_ += n;
      buf += n;
      total += n;
      if (front_off_ == front.size()) {
        inbox_.pop_front();
        front_off_ = 0;
      }
    }
    consumed(total);
    return total;
  }

  void start_read(asio::mutable_buffer buf, Completion done) {
    if (read_done_) {
      done.complete(asio::error::in_progress, 0);
      return;
    }
    if (user_closed_) {
      done.complete(asio::error::operation_aborted, 0);
      return;
    }
    if (buf.size() == 0) {
      done.complete({}, 0);
      return;
    }
    read_done_ = std::move(done);
    read_buf_ = buf;
    serve_read();
  }

  void start_write(std::string framed, size_t n, Completion done) {
    if (user_closed_) {
      done.complete(asio::error::operation_aborted, 0);
      return;
    }
    if (state_ != State::Established || out_closed_ || write_done_) {
      done.complete(write_done_ ? asio::error::in_progress : asio::error::broken_pipe, 0);
      return;
    }
    if (n == 0) {
      done.complete({}, 0);
      return;
    }
    if (stream_->ended() || !stream_->send_framed(std::move(framed))) {
      done.complete(asio::error::broken_pipe, 0);
      return;
    }
    if (stream_->queued_bytes() < kOutboxHigh) {
      done.complete({}, n);
    } else {
      write_done_ = std::move(done);
      write_len_ = n;
    }
  }

  void shutdown_send() {
    if (state_ != State::Established || out_closed_) return;
    if (half_close_) {
      out_closed_ = true;
      send(tunnel::make_close_write(connect_id_));
      return;
    }
    // An upstream agent cannot carry a half-close: end the tunnel, as upstream frontends do.
    begin_close();
  }

  void user_close() {
    if (user_closed_) return;
    user_closed_ = true;
    read_done_.complete(asio::error::operation_aborted, 0);
    write_done_.complete(asio::error::operation_aborted, 0);
    // Received bytes nobody will read: released, and the call reads again (its end can come).
    inbox_.clear();
    front_off_ = 0;
    inbox_bytes_ = 0;
    maybe_resume();
    begin_close();
  }

  // Ends the tunnel from our side: DIAL_CLS while dialling, CLOSE_REQ when established (then
  // CLOSE_RSP is awaited for kCloseWait before the call is cancelled).
  void begin_close() {
    out_closed_ = true;
    if (stream_done_ || !stream_) {
      set_state(State::Closed, "stream closed");
      return;
    }
    switch (state_) {
      case State::Dialing:
        send(tunnel::make_close_dial(dial_id_));
        set_state(State::Closed, "dial abandoned");
        end_call();
        return;
      case State::Established:
        send(tunnel::make_close_request(connect_id_));
        set_state(State::Closing, "");
        arm_close_timer("no CLOSE_RSP");
        return;
      case State::Closing:
        return;
      case State::Closed:
        end_call();
        return;
    }
  }

  const asio::any_io_executor ex_;
  asio::steady_timer timer_;        // the dial's deadline
  asio::steady_timer close_timer_;  // how long the proxy-server has to end the call
  std::shared_ptr<h2::Stream> stream_;
  const int64_t dial_id_;
  int64_t connect_id_ = 0;
  bool half_close_ = false;
  State state_ = State::Dialing;
  bool answered_ = false;
  DialError dial_error_;
  std::string end_reason_;
  std::string protocol_error_;  // why we cancelled the call, when the proxy-server broke it
  bool user_closed_ = false;
  bool stream_done_ = false;
  bool call_ended_by_us_ = false;  // half-closed

  std::deque<std::string> inbox_;  // DATA payloads not yet read
  size_t inbox_bytes_ = 0;
  size_t front_off_ = 0;
  bool paused_ = false;  // the call's reading is paused (inbox past kInboxHigh)
  bool in_eof_ = false;
  std::error_code in_error_;
  asio::mutable_buffer read_buf_;
  Completion read_done_;

  bool out_closed_ = false;
  Completion write_done_;  // a write that waits for HTTP/2 to take the queue
  size_t write_len_ = 0;
};

io::Awaitable<GrpcTunnel::DialOutcome> GrpcTunnel::dial(ProxyConnections& connections,
                                                        std::string address,
                                                        std::chrono::milliseconds timeout) {
  auto ex = co_await asio::this_coro::executor;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto core = std::make_shared<Core>(ex, random_dial_id());
  DialOutcome out;
  Packet req = tunnel::make_dial_request(address, core->dial_id_);
  req.mutable_dialrequest()->set_konnhalfclose(true);
  auto call =
      co_await connections.start_call(core->callbacks(), deadline, tunnel::frame_packet(req).head);
  if (!call.stream) {
    out.error = DialError{call.timed_out ? DialFailure::Timeout : DialFailure::ProxyUnavailable,
                          call.timed_out ? "dial timeout: " + call.error : call.error, 0};
    co_return out;
  }
  core->attach(std::move(call.stream));
  core->timer_.expires_at(deadline);
  while (!core->answered_) {
    auto [ec] = co_await core->timer_.async_wait(io::use_nothrow);
    if (!ec) break;  // the deadline passed (a cancel means an answer arrived)
  }
  if (!core->answered_) {
    KONN_LOG(tunnel_logger(), debug, "[D{}] dial {}: no DIAL_RSP within {}ms, sending DIAL_CLS",
             core->dial_id_, address, timeout.count());
    core->begin_close();
    out.error = DialError{DialFailure::Timeout,
                          "dial timeout: no DIAL_RSP from the proxy-server within " +
                              std::to_string(timeout.count()) + "ms",
                          0};
    co_return out;
  }
  if (core->dial_error_) {
    out.error = core->dial_error_;
    co_return out;
  }
  out.tunnel = std::make_unique<GrpcTunnel>(std::move(core));
  co_return out;
}

GrpcTunnel::GrpcTunnel(std::shared_ptr<Core> core) : core_(std::move(core)) {}

GrpcTunnel::~GrpcTunnel() {
  std::error_code ignored;
  close(ignored);
}

GrpcTunnel::executor_type GrpcTunnel::get_executor() const { return core_->ex_; }

void GrpcTunnel::start_read(asio::mutable_buffer buf, Completion done) {
  core_->start_read(buf, std::move(done));
}

void GrpcTunnel::start_write(std::string framed, size_t n, Completion done) {
  core_->start_write(std::move(framed), n, std::move(done));
}

void GrpcTunnel::shutdown(asio::socket_base::shutdown_type what, std::error_code& ec) {
  ec.clear();
  if (what == asio::socket_base::shutdown_receive) return;
  if (what == asio::socket_base::shutdown_both) {
    core_->begin_close();
    return;
  }
  core_->shutdown_send();
}

void GrpcTunnel::close(std::error_code& ec) {
  ec.clear();
  core_->user_close();
}

bool GrpcTunnel::is_open() const { return !core_->user_closed_; }
int64_t GrpcTunnel::dial_id() const { return core_->dial_id_; }
int64_t GrpcTunnel::connect_id() const { return core_->connect_id_; }
bool GrpcTunnel::half_close() const { return core_->half_close_; }
std::string GrpcTunnel::end_reason() const { return core_->end_reason_; }

}  // namespace konn::core::konnectivity
