#include "core/konnectivity/grpc_tunnel.h"

#include <atomic>
#include <deque>
#include <limits>
#include <mutex>
#include <random>

#include <asio/steady_timer.hpp>

#include "core/konnectivity/proxy_stream_reactor.h"
#include "core/log/log_macros.h"
#include "core/tunnel/packet.h"

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

std::string status_text(const grpc::Status& s) {
  std::string out = "code " + std::to_string(static_cast<int>(s.error_code()));
  if (!s.error_message().empty()) out += ": " + s.error_message();
  return out;
}

}  // namespace

// The tunnel's state. Everything but `inflight_` is touched only on `ex_` (gRPC callbacks post
// there). Owned by the GrpcTunnel, by the stream until its OnDone, and by handlers in flight, so
// it outlives whichever of them ends first.
class GrpcTunnel::Core final : public StreamEvents,
                               public tunnel::WriteListener,
                               public std::enable_shared_from_this<GrpcTunnel::Core> {
 public:
  enum class State {
    Dialing,      // DIAL_REQ sent, no DIAL_RSP yet
    Established,  // DIAL_RSP without error: DATA flows
    Closing,      // we sent CLOSE_REQ and wait for CLOSE_RSP (or the stream's end)
    Closed,       // ended: CLOSE_RSP, DIAL_CLS, a failed dial, or the stream's end
  };

  Core(asio::any_io_executor ex, int64_t dial_id)
      : ex_(std::move(ex)), timer_(ex_), dial_id_(dial_id) {}

  // ---- gRPC threads ----
  void on_packet(tunnel::PacketStream& stream, Packet&& p) override {
    if (p.type() == DATA) {
      // Flow control without a lock: pause when the inbox passes the high watermark, then look
      // again, so a reader that drained it meanwhile (and found nothing to resume) is not missed.
      size_t n = p.data().data().size();
      if (inflight_.fetch_add(n) + n >= kInboxHigh) {
        stream.pause_reading(relay::PauseReason::QueueFull);
        if (inflight_.load() < kInboxLow) stream.resume_reading(relay::PauseReason::QueueFull);
      }
    }
    asio::post(ex_, [self = shared_from_this(), p = std::move(p)]() mutable {
      self->handle_packet(std::move(p));
    });
  }
  void on_stream_end(const grpc::Status& status) override {
    asio::post(ex_, [self = shared_from_this(), status] { self->handle_stream_end(status); });
  }
  void on_written(size_t bytes) override {
    asio::post(ex_, [self = shared_from_this(), bytes] {
      self->unwritten_ -= std::min(self->unwritten_, bytes);
      if (self->write_done_ && self->unwritten_ <= kOutboxLow) {
        self->write_done_.complete({}, self->write_len_);
      }
    });
  }

  // ---- the executor ----
  void handle_packet(Packet&& p) {
    switch (p.type()) {
      case DIAL_RSP: {
        const auto& r = p.dialresponse();
        if (state_ != State::Dialing || r.random() != dial_id_) return;
        answered_ = true;
        if (!r.error().empty()) {
          dial_error_ = DialError{classify(r.error()), r.error(), 0};
          set_state(State::Closed, r.error());
          stream_->close();
        } else {
          connect_id_ = r.connectid();
          half_close_ = r.konnhalfclose();
          set_state(State::Established, "");
        }
        timer_.cancel();
        return;
      }
      case DATA: {
        size_t n = p.data().data().size();
        bool mine = (state_ == State::Established || state_ == State::Closing) &&
                    p.data().connectid() == connect_id_ && !in_eof_ && !user_closed_;
        if (!mine || n == 0) {
          consumed(n);
          return;
        }
        inbox_.push_back(std::move(*p.mutable_data()->mutable_data()));
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
          stream_->close();
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

  void handle_stream_end(const grpc::Status& status) {
    stream_done_ = true;
    if (state_ == State::Dialing) {
      answered_ = true;
      dial_error_ =
          DialError{status.ok() ? DialFailure::ProxyUnavailable : classify_stream_error(status),
                    "proxy-server stream ended before DIAL_RSP: " + status_text(status), 0};
      set_state(State::Closed, dial_error_.text);
      timer_.cancel();
      return;
    }
    if (state_ != State::Closed) {
      std::string why = "proxy-server stream ended: " + status_text(status);
      if (state_ == State::Established && !in_eof_) in_error_ = asio::error::connection_reset;
      set_state(State::Closed, why);
    }
    timer_.cancel();
    serve_read();
    write_done_.complete(asio::error::broken_pipe, 0);
  }

  static DialFailure classify_stream_error(const grpc::Status& s) {
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) return DialFailure::ProxyUnavailable;
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return DialFailure::Timeout;
    DialFailure f = classify(s.error_message());
    return f == DialFailure::Other ? DialFailure::ProxyUnavailable : f;
  }

  // The far side ended the tunnel (CLOSE_RSP or DIAL_CLS): what was received is still read, then
  // EOF; writes fail.
  void remote_closed(const std::string& error) {
    in_eof_ = true;
    out_closed_ = true;
    if (!error.empty()) end_reason_ = error;
    set_state(State::Closed, error);
    stream_->close();
    timer_.cancel();
    serve_read();
    write_done_.complete(asio::error::broken_pipe, 0);
  }

  void set_state(State s, const std::string& why) {
    if (state_ == s) return;
    KONN_LOG(tunnel_logger(), debug, "[D{} C{}] {} -> {}{}{}", dial_id_, connect_id_, to_string(state_),
             to_string(s), why.empty() ? "" : ": ", why);
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

  // The reader took `n` bytes (or they were dropped): resume the stream's reads when the inbox
  // fell below the low watermark.
  void consumed(size_t n) {
    if (n == 0) return;
    size_t before = inflight_.fetch_sub(n);
    if (before >= kInboxLow && before - n < kInboxLow && stream_) {
      stream_->resume_reading(relay::PauseReason::QueueFull);
    }
  }

  // Completes the pending read when there is something to report.
  void serve_read() {
    if (!read_done_) return;
    if (!inbox_.empty()) {
      size_t n = take(read_buf_);
      read_done_.complete({}, n);
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

  void start_write(std::string bytes, Completion done) {
    if (user_closed_) {
      done.complete(asio::error::operation_aborted, 0);
      return;
    }
    if (state_ != State::Established || out_closed_ || write_done_) {
      done.complete(write_done_ ? asio::error::in_progress : asio::error::broken_pipe, 0);
      return;
    }
    size_t n = bytes.size();
    if (n == 0) {
      done.complete({}, 0);
      return;
    }
    if (!stream_->send(tunnel::make_data(connect_id_, std::move(bytes)), shared_from_this())) {
      done.complete(asio::error::broken_pipe, 0);
      return;
    }
    bytes_up_ += n;
    unwritten_ += n;
    if (unwritten_ < kOutboxHigh) {
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
      stream_->send(tunnel::make_close_write(connect_id_));
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
    // Received bytes nobody will read: release them (and the stream's read gate).
    size_t dropped = 0;
    for (auto& s : inbox_) dropped += s.size();
    dropped -= front_off_;
    inbox_.clear();
    front_off_ = 0;
    consumed(dropped);
    begin_close();
  }

  // Ends the tunnel from our side: DIAL_CLS while dialling, CLOSE_REQ when established (then
  // CLOSE_RSP is awaited for kCloseWait before the stream is cancelled).
  void begin_close() {
    out_closed_ = true;
    if (stream_->closing() && state_ != State::Closed) {
      // The stream is already going away (cancelled by the Dialer at shutdown, or broken):
      // nothing can be sent on it any more.
      set_state(State::Closed, "stream closing");
      return;
    }
    switch (state_) {
      case State::Dialing:
        stream_->send(tunnel::make_close_dial(dial_id_));
        set_state(State::Closed, "dial abandoned");
        stream_->close();
        return;
      case State::Established: {
        stream_->send(tunnel::make_close_request(connect_id_));
        set_state(State::Closing, "");
        timer_.expires_after(kCloseWait);
        timer_.async_wait([self = shared_from_this()](std::error_code ec) {
          if (ec || self->state_ != State::Closing) return;
          self->set_state(State::Closed, "no CLOSE_RSP within 10s");
          self->stream_->close({h2::grpc_code::kCancelled, "no CLOSE_RSP"}, true);
        });
        return;
      }
      case State::Closing:
      case State::Closed:
        if (state_ == State::Closed && !stream_done_) stream_->close();
        return;
    }
  }

  asio::any_io_executor ex_;
  asio::steady_timer timer_;  // the dial's deadline, then the CLOSE_RSP wait
  std::shared_ptr<ProxyStreamReactor> stream_;
  const int64_t dial_id_;
  int64_t connect_id_ = 0;
  bool half_close_ = false;
  State state_ = State::Dialing;
  bool answered_ = false;
  DialError dial_error_;
  std::string end_reason_;
  bool user_closed_ = false;
  bool stream_done_ = false;

  std::atomic<size_t> inflight_{0};  // DATA bytes from gRPC not yet read (gRPC threads add)
  std::deque<std::string> inbox_;
  size_t front_off_ = 0;
  bool in_eof_ = false;
  std::error_code in_error_;
  asio::mutable_buffer read_buf_;
  Completion read_done_;

  size_t unwritten_ = 0;  // queued on the stream, not yet handed to gRPC
  bool out_closed_ = false;
  Completion write_done_;
  size_t write_len_ = 0;
  uint64_t bytes_up_ = 0;
};

io::Awaitable<GrpcTunnel::DialOutcome> GrpcTunnel::dial(ProxyService::Stub& stub,
                                                        std::string address,
                                                        std::chrono::milliseconds timeout,
                                                        std::shared_ptr<StreamTracker> tracker) {
  auto ex = co_await asio::this_coro::executor;
  auto core = std::make_shared<Core>(ex, random_dial_id());
  core->stream_ = ProxyStreamReactor::start(stub, core, std::move(tracker));
  Packet req = tunnel::make_dial_request(address, core->dial_id_);
  req.mutable_dialrequest()->set_konnhalfclose(true);
  core->stream_->send(std::move(req));
  core->timer_.expires_after(timeout);
  while (!core->answered_) {
    auto [ec] = co_await core->timer_.async_wait(io::use_nothrow);
    if (!ec) break;  // the deadline passed (a cancel means an answer arrived)
  }
  DialOutcome out;
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

void GrpcTunnel::start_write(std::string bytes, Completion done) {
  core_->start_write(std::move(bytes), std::move(done));
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
