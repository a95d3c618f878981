#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <sys/socket.h>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <spdlog/logger.h>

#include "core/config/duration.h"
#include "core/http/http1_parser.h"
#include "core/io/asio_compat.h"
#include "core/io/descriptor_reserve.h"
#include "core/log/log_macros.h"
#include "core/net/endpoint.h"
#include "core/relay/write_role.h"
#include "core/tunnel/deadlines.h"
#include "core/tunnel/packet.h"
#include "core/tunnel/socket_reader.h"
#include "core/tunnel/tunnel_life.h"
#include "proxy-server/backend/backend.h"
#include "proxy-server/tunnel/client_backlog.h"
#include "proxy-server/tunnel/frontend.h"
#include "proxy-server/tunnel/router.h"

// One connection of the HTTP CONNECT frontend (HttpConnectServer): the request head, the dial
// through an agent, then the relay between the client's socket and the agent's stream.
namespace konn::server::http_connect {

using core::io::use_nothrow;
using core::tunnel::make_close_dial;
using core::tunnel::make_close_request;
using core::tunnel::make_close_write;
using core::tunnel::make_data;
using core::tunnel::make_dial_request;
using core::tunnel::make_window_update;
using State = core::tunnel::TunnelLife::State;
using Side = core::tunnel::TunnelLife::Side;

// The answer to a successful CONNECT, byte for byte as upstream's.
inline constexpr char kEstablished[] = "HTTP/1.1 200 Connection Established\r\n\r\n";

// A plain-text error answer that closes the connection.
std::string error_response(int status, const std::string& body);
// How upstream maps an agent's dial error onto an HTTP status.
int status_for_agent_error(const std::string& error);
// The `server.http-connect` logger, looked up once.
const std::shared_ptr<spdlog::logger>& connect_logger();
// A dial id: non-negative, like Go's rand.Int63().
int64_t random_dial_id();

inline auto& lowest(asio::local::stream_protocol::socket& s) { return s; }
inline auto& lowest(asio::ssl::stream<asio::ip::tcp::socket>& s) { return s.lowest_layer(); }

// One CONNECT connection. Everything but the Frontend methods runs on the connection's executor.
// The Frontend methods run on the agent connection's worker (the Backend's home thread, often this
// connection's own: the acceptor places it there) and only post to the executor, apart from the
// atomics they document, the dial answer (taken inline when already on this connection's thread)
// and, on a plain socket, DATA written straight to the client while nothing waits in out_
// (WriteRole).
//
// The tunnel's policy (state, watermark towards the agent, credit both ways, queue cap, quiet
// timer, half-close, close summary) is its TunnelLife, on the executor but for its atomics:
// Idle (reading the head) -> Dialing -> Established -> Closing (CLOSE_REQ sent after the client's
// EOF) -> Closed (no more reads; what the agent sent is flushed after its close, else dropped).
// This class keeps the socket's I/O.
template <typename Stream>
class ConnectSession : public Frontend,
                       public std::enable_shared_from_this<ConnectSession<Stream>> {
 public:
  ConnectSession(Stream stream, Router& router, std::string peer,
                 core::io::DescriptorReserve::Lease lease)
      : lease_(std::move(lease)),
        stream_(std::move(stream)),
        router_(router),
        log_(connect_logger()),
        peer_(std::move(peer)),
        wake_(stream_.get_executor()),
        resume_(stream_.get_executor()) {}

  ~ConnectSession() override {
    router_.deadlines().cancel(close_deadline_);
    router_.metrics().http_connect.Decrement();
    if (has_slot_) router_.release_frontend();
  }

  void start() {
    router_.metrics().http_connect.Increment();
    has_slot_ = router_.acquire_frontend(peer_);
    asio::co_spawn(stream_.get_executor(), run(this->shared_from_this()), asio::detached);
  }

  // Runs `fn` now when called on this connection's thread, else posts it there.
  template <typename Fn>
  void run_here(Fn&& fn) {
    // target() points into `ex`, which must outlive the pointer.
    const auto ex = stream_.get_executor();
    const auto* own = ex.template target<asio::io_context::executor_type>();
    if (own && own->running_in_this_thread()) {
      fn();
      return;
    }
    asio::post(ex, std::forward<Fn>(fn));
  }

  // --- Frontend (the agent connection's worker) ---
  bool deliver_dial_response(Packet&& p) override {
    if (!dialing_.exchange(false)) return false;  // gave up already
    // On this connection's thread (the acceptor placed it beside the agent connection) the answer
    // is taken inline: it only records the result and wakes the dial's coroutine.
    run_here([self = this->shared_from_this(), p = std::move(p)]() {
      self->dial_result_ = p.dialresponse();
      self->dial_answered_ = true;
      if (self->dial_result_.error().empty()) {
        // Established from this handler on, not from the dial coroutine's resumption: the agent's
        // first DATA (or half-close) for a server-first protocol is posted right behind this
        // answer and runs before the coroutine does. It waits in out_ behind the 200 (writing_).
        self->connect_id_ = self->dial_result_.connectid();
        self->set_state(State::Established);
        self->writing_ = true;
      }
      self->wake_.cancel();
    });
    return true;
  }
  void deliver_data(Packet&& p) override {
    life_.touch();
    if (!life_.policy().flow_control) backlog_.added(p.data().data().size());
    if constexpr (!kTls) {  // a TLS stream is written by its executor only (OpenSSL state)
      auto direct = write_role_.deliver(p.data().data(), core::relay::kDirectWriteMax);
      if (direct.written > 0) written_to_client(direct.written);
      if (!direct.post) return;
      if (direct.written > 0) p.mutable_data()->mutable_data()->erase(0, direct.written);
    }
    asio::post(stream_.get_executor(),
               [self = this->shared_from_this(), p = std::move(p)]() mutable {
                 self->queue_to_client(std::move(p));
               });
  }
  void deliver_close(Packet&& p) override {
    bool dial = p.type() == DIAL_CLS;
    if (dial && !dialing_.exchange(false)) return;
    asio::post(stream_.get_executor(), [self = this->shared_from_this(), dial]() {
      if (dial) {
        self->dial_answered_ = true;
        self->dial_result_.set_error("dial closed by agent");
        self->wake_.cancel();
      } else {
        self->agent_closed("closed by agent");
      }
    });
  }
  void deliver_window_update(int64_t bytes) override {
    life_.add_credit(bytes);  // read_client() re-checks the window after arming its wait
    wake_reader();
  }
  void deliver_close_write(Packet&&) override {
    asio::post(stream_.get_executor(),
               [self = this->shared_from_this()]() { self->agent_finished_sending(); });
  }
  void backend_gone() override {
    bool was_dialing = dialing_.exchange(false);
    asio::post(stream_.get_executor(), [self = this->shared_from_this(), was_dialing]() {
      if (was_dialing) {
        self->dial_answered_ = true;
        self->backend_lost_ = true;
        self->wake_.cancel();
      } else {
        self->agent_closed("agent disconnected");
      }
    });
  }
  void close_stalled(std::chrono::steady_clock::duration bound) override {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(bound).count();
    backlog_.release();  // the agent moves again now, not once the socket is closed
    run_here([self = this->shared_from_this(), ms]() {
      self->router_.metrics().tunnels_over_cap_total.Add({}).Increment();
      if (self->life_.is(State::Closed)) {
        // The agent closed it and its last bytes wait for the client: give up on them (the
        // packet being written stays until its write completes, as in close_tunnel).
        while (self->out_.size() > (self->writing_ ? 1U : 0U)) self->out_.pop_back();
        self->finish_socket();
        return;
      }
      self->close_tunnel(
          fmt::format("client took nothing for {} ms (--stalled-client-timeout)", ms), true);
    });
  }
  TunnelStatus status() const override {
    // address_ was written before the dial was recorded; the tunnel is listed only after that.
    return {"http-connect",    address_,         life_.started(),
            life_.bytes_out(), life_.bytes_in(), life_.half_counted()};
  }
  std::string log_prefix() const override {
    return "[C" + std::to_string(connect_id_.load()) + " D" + std::to_string(random_) + " A" +
           agent_id_ + "] ";
  }

 private:
  static constexpr bool kTls = std::is_same_v<Stream, asio::ssl::stream<asio::ip::tcp::socket>>;
  static constexpr size_t kTlsRead = 16 * 1024;

  // Bytes of ours in the backend's queue were written: maybe resume reading the client.
  struct ToAgentListener : core::tunnel::WriteListener {
    ConnectSession* owner = nullptr;
    void on_written(size_t bytes) override {
      if (owner->life_.left_for_peer(bytes)) owner->wake_reader();
    }
  };

  // The tunnel's one transition (logged by the life). The executor only.
  void set_state(State s) {
    life_.to(s, *log_, [this] { return log_prefix(); });
  }

  void wake_reader() {
    if (!reader_paused_.load()) return;
    asio::post(stream_.get_executor(),
               [self = this->shared_from_this()] { self->resume_.cancel(); });
  }

  // The TLS handshake (within --tls-handshake-timeout) and the --max-frontend-streams slot.
  // False when the connection is done (refused, or the handshake failed).
  core::io::Awaitable<bool> admit() {
    const auto& options = router_.options();
    if constexpr (kTls) {
      using namespace asio::experimental::awaitable_operators;
      asio::steady_timer t(stream_.get_executor(), options.tls_handshake_timeout);
      auto r = co_await (stream_.async_handshake(asio::ssl::stream_base::server, use_nothrow) ||
                         t.async_wait(use_nothrow));
      if (r.index() == 1) {
        router_.metrics().limit_hit("handshake_timeout");
        KONN_LOG(log_, info,
                 "http-connect client {}: no TLS handshake within {} "
                 "(--tls-handshake-timeout)",
                 peer_, core::config::format_go_duration(options.tls_handshake_timeout));
        co_return false;
      }
      if (std::get<0>(r) != std::make_tuple(std::error_code())) {
        KONN_LOG(log_, info, "http-connect client {}: TLS handshake failed: {}", peer_,
                 std::get<0>(std::get<0>(r)).message());
        co_return false;
      }
    }
    if (!has_slot_) {
      co_await reply_and_close(503, "too many frontend connections (limit " +
                                        std::to_string(options.max_frontend_streams) +
                                        ", --max-frontend-streams)\n");
      co_return false;
    }
    co_return true;
  }

  // `fn` runs on this connection's executor once `delay` has passed, unless the returned id is
  // cancelled first (router_.deadlines().cancel). The router's shared deadlines, not a timer of
  // this connection: these deadlines (the request head's, the close request's) are nearly always
  // cancelled, and arming or cancelling one then costs neither a timerfd_settime nor a posted
  // cancellation. The callback holds the session weakly: the coroutine or the backend's
  // connection table keeps it while a deadline matters.
  template <typename Fn>
  core::tunnel::Deadlines::Id arm_deadline(std::chrono::nanoseconds delay, Fn fn) {
    std::weak_ptr<ConnectSession> weak = this->shared_from_this();
    return router_.deadlines().arm(
        std::chrono::duration_cast<core::tunnel::Deadlines::Clock::duration>(delay),
        [weak, ex = stream_.get_executor(), fn = std::move(fn)] {
          asio::post(ex, [weak, fn] {
            if (auto self = weak.lock()) fn(*self);
          });
        });
  }

  // read_head()'s bound (--http-connect-header-timeout), armed for the life of this object.
  struct HeadDeadline {
    explicit HeadDeadline(ConnectSession& s)
        : session(s),
          id(s.arm_deadline(s.router_.options().http_connect_header_timeout,
                            [](ConnectSession& self) {
                              if (self.head_done_) return;
                              self.head_timed_out_ = true;
                              std::error_code ignored;
                              lowest(self.stream_).cancel(ignored);
                            })) {}
    ~HeadDeadline() {
      session.head_done_ = true;
      session.router_.deadlines().cancel(id);
    }
    HeadDeadline(const HeadDeadline&) = delete;
    HeadDeadline& operator=(const HeadDeadline&) = delete;
    ConnectSession& session;
    core::tunnel::Deadlines::Id id;
  };

  struct ConnectHead {
    std::string target;    // host:port
    std::string leftover;  // bytes the client sent after the head
  };
  // Reads the CONNECT head within the header timeout (slowloris bound); on bad input answers
  // the client and returns nothing. Its own coroutine, so that the parser and read buffer (and
  // their frame) are gone once the tunnel is up: an idle tunnel holds none of it.
  core::io::Awaitable<std::optional<ConnectHead>> read_head() {
    const auto& options = router_.options();
    ConnectHead head;
    core::http::Http1Parser parser(core::http::Http1Parser::Kind::Request,
                                   static_cast<size_t>(options.http_connect_max_header_bytes));
    std::string buf(4 * 1024, '\0');  // a request head is a few hundred bytes
    {
      // The deadline cancels the socket's read. Not a race of the read and a timer: that would
      // be a coroutine for each, and a parallel group, per request.
      HeadDeadline deadline(*this);
      for (;;) {
        auto [ec, n] = co_await stream_.async_read_some(asio::buffer(buf), use_nothrow);
        if (head_timed_out_) {
          router_.metrics().limit_hit("connect_header_timeout");
          KONN_LOG(log_, info, "http-connect client {}: no complete request head in {}; closing",
                   peer_,
                   core::config::format_go_duration(router_.options().http_connect_header_timeout));
          co_return std::nullopt;
        }
        if (ec) co_return std::nullopt;
        auto res = parser.feed(std::string_view(buf.data(), n));
        if (res.status == core::http::Http1Parser::Status::Invalid) {
          if (parser.error_status() == 431) router_.metrics().limit_hit("connect_header_size");
          KONN_LOG(log_, info, "http-connect client {}: bad request: {}", peer_, parser.error());
          head_done_ = true;  // the deadline must not cut the answer short
          co_await reply_and_close(parser.error_status(), parser.error() + "\n");
          co_return std::nullopt;
        }
        if (res.status == core::http::Http1Parser::Status::MessageComplete) {
          head.leftover.assign(buf.data() + res.consumed, n - res.consumed);
          break;
        }
      }
    }
    if (parser.head().method != "CONNECT") {
      co_await reply_and_close(405, "this proxy only supports CONNECT passthrough\n");
      co_return std::nullopt;
    }
    head.target = parser.head().target;
    co_return head;
  }

  core::io::Awaitable<void> run(std::shared_ptr<ConnectSession> self) {
    (void)self;  // keeps this session alive for the whole coroutine
    if (!co_await admit()) co_return;
    auto head = co_await read_head();
    if (!head) co_return;
    std::string target = std::move(head->target);
    std::string leftover = std::move(head->leftover);
    head.reset();
    auto hp = core::net::parse_host_port(target);
    if (!hp || hp->port == 0) {
      co_await reply_and_close(400, "CONNECT target must be host:port, got \"" + target + "\"\n");
      co_return;
    }
    address_ = std::move(target);
    co_await dial(hp->host);
    if (!life_.ever_established()) co_return;
    if (!leftover.empty()) send_to_agent(std::move(leftover));
    co_await read_client();
  }

  core::io::Awaitable<void> reply_and_close(int status, const std::string& body) {
    std::string rsp = error_response(status, body);
    co_await asio::async_write(stream_, asio::buffer(rsp), use_nothrow);
    std::error_code ignored;
    lowest(stream_).shutdown(asio::socket_base::shutdown_both, ignored);
    lowest(stream_).close(ignored);
  }

  core::io::Awaitable<void> dial(const std::string& host) {
    random_ = random_dial_id();
    backend_ = router_.backends().pick(host);
    if (!backend_) {
      router_.dial_failed("no_agent", nullptr, address_, "No agent available");
      co_await reply_and_close(500, "currently no tunnels available: No agent available");
      co_return;
    }
    agent_id_ = backend_->agent_id();
    const bool flow = backend_->flow_control();
    if (!flow) backlog_.bind(backend_, this->shared_from_this());
    // Upstream closes the tunnel on the client's EOF; a half-close is passed on only when asked
    // for (--http-connect-half-close) and the agent supports it.
    const bool half_close = router_.options().http_connect_half_close && backend_->half_close();
    // Set before the dial is sent: from the answer on, the agent connection's worker touches
    // the quiet timer (deliver_data).
    std::weak_ptr<ConnectSession> weak = this->shared_from_this();
    life_.configure(frontend_tunnel_policy(router_.options(), flow, half_close),
                    stream_.get_executor(), [weak] {
                      if (auto self = weak.lock()) self->quiet_for_too_long();
                    });
    // Where this tunnel's queue towards the client counts as full (full_frontend_write_queues):
    // half the credit window with konn's flow control (the agent soon stops sending for this
    // tunnel alone); otherwise the level at which this tunnel alone stops the agent's stream.
    full_mark_ = flow ? static_cast<size_t>(core::tunnel::kTunnelWindow / 2)
                      : static_cast<size_t>(std::min<int64_t>(
                            Backend::kClientBacklogHigh,
                            static_cast<int64_t>(router_.options().tunnel_queue_cap_bytes() / 2)));
    if (auto refused = router_.add_pending(random_, this->shared_from_this(), *backend_)) {
      co_await reply_and_close(refused->http_status,
                               "Failed to tunnel dial request: " + refused->error);
      co_return;
    }
    dialing_ = true;
    set_state(State::Dialing);
    auto started = std::chrono::steady_clock::now();
    Packet request = make_dial_request(address_, random_);
    request.mutable_dialrequest()->set_konnhalfclose(life_.policy().half_close);
    if (!backend_->send(std::move(request))) {
      dialing_ = false;
      router_.pending().take(random_);
      co_await reply_and_close(502, "Failed to tunnel dial request: agent disconnected");
      co_return;
    }
    auto timeout = router_.options().backend_dial_timeout;
    wake_.expires_at(timeout.count() > 0 ? started + timeout
                                         : std::chrono::steady_clock::time_point::max());
    while (!dial_answered_) {
      auto [ec] = co_await wake_.async_wait(use_nothrow);
      if (!ec && !dial_answered_ && dialing_.exchange(false)) {  // the timer expired
        router_.pending().take(random_);
        router_.dial_failed("backend_dial_timeout", backend_.get(), address_,
                            "Backend dial timeout: no answer from agent " + agent_id_);
        backend_->send(make_close_dial(random_));
        co_await reply_and_close(504, "Backend dial timeout: no answer from agent " + agent_id_);
        co_return;
      }
    }
    if (backend_lost_) {
      co_await reply_and_close(502, "Backend context error: agent disconnected before answering");
      co_return;
    }
    if (!dial_result_.error().empty()) {
      KONN_CONN_LOG(log_, info, *this, "dial to {} failed: {}", address_, dial_result_.error());
      co_await reply_and_close(status_for_agent_error(dial_result_.error()), dial_result_.error());
      co_return;
    }
    established_at_ = std::chrono::steady_clock::now();
    router_.metrics().dial_duration.Observe(
        std::chrono::duration<double>(established_at_ - started).count());
    router_.metrics().established.Increment();
    // Agent DATA may already be queued (server-first protocols): writing_ was set with the answer,
    // so it waits in out_ until the 200 is written and the two writes never interleave.
    std::string_view established(kEstablished, sizeof(kEstablished) - 1);
    if constexpr (!kTls) {  // written at once, as a rule: no completion to wait for
      ssize_t sent = ::send(lowest(stream_).native_handle(), established.data(), established.size(),
                            MSG_DONTWAIT | MSG_NOSIGNAL);
      if (sent > 0) established.remove_prefix(static_cast<size_t>(sent));
    }
    std::error_code wec;
    if (!established.empty()) {
      std::tie(wec, std::ignore) =
          co_await asio::async_write(stream_, asio::buffer(established), use_nothrow);
    }
    writing_ = false;
    if (wec) {
      close_tunnel("client went away before 200 was written", true);
      co_return;
    }
    pump_writes();
  }

  void send_to_agent(std::string&& bytes) {
    life_.touch();
    const size_t n = bytes.size();
    life_.queued_to_peer(n);  // read_client() pauses on the watermark itself
    life_.spend_credit(n);
    router_.metrics().bytes_to_agent.Increment(static_cast<double>(n));
    life_.count_out(n);
    listener_.owner = this;
    std::shared_ptr<core::tunnel::WriteListener> l(this->shared_from_this(), &listener_);
    backend_->send(make_data(connect_id_, std::move(bytes)), std::move(l));
  }

  core::io::Awaitable<void> read_client() {
    for (;;) {
      // Backpressure: wait while the agent stream holds too much of ours or credit is gone.
      bool counted = false;
      while (!life_.is(State::Closed) && (life_.over_high_watermark() || life_.out_of_credit())) {
        reader_paused_ = true;
        if (!counted) {  // one pause, however many wake-ups it takes
          counted = true;
          const char* reason = life_.over_high_watermark() ? "queue_full" : "no_credit";
          router_.metrics().reads_paused_total.Add({{"reason", reason}}).Increment();
        }
        resume_.expires_at(std::chrono::steady_clock::time_point::max());
        // Re-check after arming: a wake that raced the check is not lost.
        if (!life_.over_high_watermark() && !life_.out_of_credit()) break;
        co_await resume_.async_wait(use_nothrow);
      }
      reader_paused_ = false;
      life_.resume_if_drained();  // the watermark wakes this loop again next time
      if (life_.is(State::Closed)) co_return;
      // On a plain socket, wait for readability before allocating, so an idle tunnel holds no
      // buffer, then read what is there into a string of its size (SocketReader). Exception for
      // TLS: OpenSSL may hold decrypted bytes the socket no longer shows, and a read returns at
      // most one 16 KiB record anyway, so it reads directly.
      std::error_code wec;
      std::error_code ec;
      std::string chunk;
      if constexpr (kTls) {
        if (life_.is(State::Closed)) co_return;
        chunk.assign(kTlsRead, '\0');
        size_t n = 0;
        std::tie(ec, n) = co_await stream_.async_read_some(asio::buffer(chunk), use_nothrow);
        chunk = std::string(chunk.data(), n);  // a record at most: below kSmallRead
      } else {
        std::tie(wec) =
            co_await lowest(stream_).async_wait(asio::socket_base::wait_read, use_nothrow);
        if (life_.is(State::Closed)) co_return;
        if (!wec) {
          chunk = reader_.read(lowest(stream_).native_handle(), core::tunnel::kReadChunk, ec);
          if (ec == asio::error::would_block) continue;
        }
      }
      if (!chunk.empty()) send_to_agent(std::move(chunk));
      if (ec || wec) {
        // A TLS client that closes without close_notify gives stream_truncated: still an EOF.
        bool eof = !wec && (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated);
        if (eof && life_.policy().half_close) {
          client_finished_sending();
        } else {
          client_eof();
        }
        co_return;
      }
    }
  }

  // Half-close (our agent): the client's EOF goes to the agent, which shuts down its write side
  // to the destination and keeps sending us what the destination still says.
  void client_finished_sending() {
    if (!life_.is(State::Established)) return;
    KONN_CONN_LOG(log_, debug, *this, "client finished sending: half-close to the agent");
    backend_->send(make_close_write(connect_id_));
    one_side_finished(Side::Local);
  }

  // The first side to finish starts --half-close-timeout (or the idle limit, when shorter), and
  // the tunnel counts in half_closed_tunnels until it closes.
  void one_side_finished(Side side) {
    if (life_.one_side_finished(side)) router_.metrics().half_closed.Increment();
  }

  // The quiet timer fired: --half-close-timeout once a side finished, else --tunnel-idle-timeout.
  void quiet_for_too_long() {
    if (!life_.open()) return;
    bool half = life_.half_closed();
    router_.metrics().tunnel_timeout(half ? "half_close" : "idle");
    std::string reason = router_.options().quiet_reason(half);
    KONN_CONN_LOG(log_, info, *this, "closing: {}", reason);
    close_tunnel(reason, true);
  }

  // Half-close: the destination finished sending. Over a plain socket the client gets a
  // shutdown(SHUT_WR) once queued bytes are written; a TLS client gets a full close, since Asio's
  // TLS shutdown waits for the peer's close_notify and cannot leave the read side open.
  void agent_finished_sending() {
    if (!life_.open()) return;
    if constexpr (!kTls) write_role_.close();  // the write side shuts once out_ is written
    if constexpr (!kTls) {
      one_side_finished(Side::Peer);
    } else {
      life_.finished_sending(Side::Peer);  // recorded, not counted: the tunnel closes now
    }
    if constexpr (kTls) {
      if (!life_.is(State::Closing) && !life_.finished(Side::Local)) {
        set_state(State::Closing);
        backend_->send(make_close_request(connect_id_));
      }
      agent_closed("destination finished sending (TLS client: full close)");
    } else {
      pump_writes();
    }
  }

  // The client finished sending, and half-close is not available (an upstream agent, or a read
  // error): the agent is asked to close; bytes it already sent are written before the socket
  // closes.
  void client_eof() {
    if (!life_.is(State::Established)) return;
    set_state(State::Closing);
    backend_->send(make_close_request(connect_id_));
    close_deadline_ = arm_deadline(kCloseWait, [](ConnectSession& self) {
      self.close_deadline_ = 0;
      self.close_tunnel("agent did not answer the close request", false);
    });
  }

  void queue_to_client(Packet&& p) {
    if constexpr (!kTls) write_role_.arrived();
    size_t n = p.data().data().size();
    if (!life_.open()) {
      backlog_.taken(n);  // dropped: it no longer waits
      return;
    }
    if (life_.over_cap(to_client_queued_ + n)) {
      router_.metrics().tunnels_over_cap_total.Add({}).Increment();
      KONN_CONN_LOG(log_, warn, *this,
                    "closing tunnel: the client stopped reading and {} bytes wait; other tunnels "
                    "are unaffected",
                    to_client_queued_);
      close_tunnel("client not reading: tunnel queue over its cap", true);
      return;
    }
    life_.touch();
    to_client_queued_ += n;
    life_.count_in(n);
    router_.metrics().bytes_to_client.Increment(static_cast<double>(n));
    out_.push_back(std::move(p));
    count_full();
    pump_writes();
  }

  // Keeps full_frontend_write_queues in step with this tunnel's queue (the executor's thread).
  void count_full() {
    const bool full = !socket_done_ && to_client_queued_ >= full_mark_;
    if (full == full_counted_) return;
    full_counted_ = full;
    if (full) {
      router_.metrics().full_write_queues.Increment();
    } else {
      router_.metrics().full_write_queues.Decrement();
    }
  }

  // Bytes the agent connection's worker wrote to the client itself (WriteRole): counted as the
  // executor's
  // writes are; credit goes back from here.
  void written_to_client(size_t n) {
    if (!life_.policy().flow_control) backlog_.taken(n);
    life_.count_in(n);
    router_.metrics().bytes_to_client.Increment(static_cast<double>(n));
    return_credit(n);
  }

  void pump_writes() {
    if (writing_ || out_.empty()) {
      if (!writing_ && out_.empty() && life_.is(State::Closed)) {
        finish_socket();  // flushed after the agent's close (or already done)
      } else if (!writing_ && out_.empty() && life_.finished(Side::Peer) && !write_shut_) {
        write_shut_ = true;
        std::error_code ignored;
        lowest(stream_).shutdown(asio::socket_base::shutdown_send, ignored);
      } else if constexpr (!kTls) {
        if (!writing_ && life_.open() && !life_.finished(Side::Peer)) {
          // Nothing queued or in flight: small DATA may go straight to the client.
          write_role_.open(lowest(stream_).native_handle());
        }
      }
      return;
    }
    writing_ = true;
    const std::string& bytes = out_.front().data().data();
    asio::async_write(stream_, asio::buffer(bytes),
                      [self = this->shared_from_this()](std::error_code ec, size_t n) {
                        self->writing_ = false;
                        self->out_.pop_front();
                        self->to_client_queued_ -= n;
                        self->count_full();
                        if (!self->life_.policy().flow_control) self->backlog_.taken(n);
                        if (ec) {
                          if (self->life_.is(State::Closed)) {
                            // Flushing after the agent's close and the client is gone: nothing
                            // else will finish the socket (close_tunnel is a no-op once closed).
                            self->out_.clear();
                            self->finish_socket();
                            return;
                          }
                          self->close_tunnel("write to client failed: " + ec.message(), true);
                          return;
                        }
                        self->return_credit(n);
                        self->pump_writes();
                      });
  }

  // From the executor or, for direct writes, the agent connection's worker (CreditReturn takes
  // both).
  void return_credit(size_t n) {
    if (int64_t bytes = life_.consumed(n); bytes > 0) {
      backend_->send(make_window_update(connect_id_, bytes));
    }
  }

  // CLOSE_RSP (or the agent stream's end): write what is queued, then close.
  void agent_closed(const std::string& reason) {
    if (life_.is(State::Closed)) return;
    if constexpr (!kTls) write_role_.close();
    set_state(State::Closed);  // what is queued is flushed first (pump_writes)
    life_.set_reason(reason);
    resume_.cancel();
    pump_writes();
  }

  // Ends the tunnel now; with `notify_agent`, the agent is told to close its side.
  void close_tunnel(const std::string& reason, bool notify_agent) {
    if (life_.is(State::Closed)) return;
    if constexpr (!kTls) write_role_.close();
    const State prev = life_.state();
    set_state(State::Closed);
    life_.set_reason(reason);
    if (life_.ever_established() && backend_) {
      backend_->forget_connection(connect_id_);
      if (notify_agent && prev != State::Closing) backend_->send(make_close_request(connect_id_));
    }
    // The packet being written stays until its write completes (its bytes are the write's
    // buffer, and the completion pops it); closing the socket below ends that write.
    while (out_.size() > (writing_ ? 1U : 0U)) out_.pop_back();
    resume_.cancel();
    finish_socket();
  }

  void finish_socket() {
    if (socket_done_) return;
    socket_done_ = true;
    count_full();  // no longer counted, whatever is left queued
    backlog_.release();
    if constexpr (!kTls) write_role_.close();  // before the descriptor can be closed and reused
    router_.deadlines().cancel(close_deadline_);
    router_.metrics().tunnel_ended(life_.end_half_close(), life_.ever_established(),
                                   established_at_);
    std::error_code ignored;
    lowest(stream_).close(ignored);  // sends the FIN a shutdown(2) would: one system call
    KONN_CONN_LOG(log_, debug, *this,
                  "http-connect tunnel closed: {} address={} from_client={}B to_client={}B",
                  life_.reason(), address_, life_.bytes_out(), life_.bytes_in());
  }

  // The socket's descriptor state (WorkerPool::place). First, so it is returned last.
  core::io::DescriptorReserve::Lease lease_;
  Stream stream_;
  Router& router_;
  std::shared_ptr<spdlog::logger> log_;
  std::string peer_;
  asio::steady_timer wake_;                         // the dial's answer or timeout
  bool head_done_ = false;                          // read_head() ended: its deadline is void
  bool head_timed_out_ = false;                     // the deadline cancelled read_head()'s read
  asio::steady_timer resume_;                       // reader backpressure
  core::tunnel::Deadlines::Id close_deadline_ = 0;  // client_eof()'s wait for CLOSE_RSP
  // State, watermark, credit, quiet timer (touched by the agent connection's worker too), cap,
  // half-close and close summary (its byte counts are atomics: the status page reads them, and
  // direct writes count too). Its policy is set before the dial, then never changed.
  core::tunnel::TunnelLife life_;
  ToAgentListener listener_;
  core::relay::WriteRole write_role_;  // plain sockets only (TLS: never opened)

  std::string address_;
  int64_t random_ = 0;
  std::atomic<int64_t> connect_id_{0};
  std::string agent_id_;
  std::shared_ptr<Backend> backend_;
  std::atomic<bool> dialing_{false};
  bool dial_answered_ = false;
  bool backend_lost_ = false;
  DialResponse dial_result_;
  std::chrono::steady_clock::time_point established_at_;
  std::atomic<bool> reader_paused_{false};
  core::tunnel::SocketReader reader_;  // read_client's (plain sockets)
  // Packets for the client. A list: libstdc++'s deque allocates ~600 bytes even when empty, and
  // most tunnels sit idle with nothing queued.
  std::list<Packet> out_;
  size_t to_client_queued_ = 0;
  size_t full_mark_ = SIZE_MAX;  // set with the backend: see full_frontend_write_queues
  bool full_counted_ = false;    // counted in full_frontend_write_queues
  bool writing_ = false;
  ClientBacklog backlog_;     // without flow control: the agent's bytes waiting for the client
  bool write_shut_ = false;   // half-close: the client socket's write side is shut down
  bool has_slot_ = false;     // took a --max-frontend-streams slot in start()
  bool socket_done_ = false;  // the socket is closed (finish_socket)
};

// Instantiated once, in connect_session.cc: a unix socket client and a TLS one.
extern template class ConnectSession<asio::local::stream_protocol::socket>;
extern template class ConnectSession<asio::ssl::stream<asio::ip::tcp::socket>>;

}  // namespace konn::server::http_connect
