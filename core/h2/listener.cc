#include "core/h2/listener.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asio/dispatch.hpp>
#include <asio/post.hpp>
#include <asio/ssl.hpp>
#include <fmt/format.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "core/log/log_macros.h"
#include "core/log/logger.h"
#include "core/net/listener.h"

namespace konn::core::h2 {

namespace {

const std::shared_ptr<spdlog::logger>& listener_logger() {
  static const auto log = core::log::get("h2");
  return log;
}

// "127.0.0.1:41234" or "[::1]:41234"; an IPv4 peer of a dual-stack socket as IPv4.
std::string address_text(const asio::ip::tcp::endpoint& ep) {
  auto addr = ep.address();
  if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
    addr = asio::ip::make_address_v4(asio::ip::v4_mapped, addr.to_v6());
  }
  if (addr.is_v6()) return fmt::format("[{}]:{}", addr.to_string(), ep.port());
  return fmt::format("{}:{}", addr.to_string(), ep.port());
}

// The verified client certificate of a completed handshake, if any.
std::optional<PeerCertificate> peer_certificate(SSL* ssl) {
  if (ssl == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) return std::nullopt;
  const X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr) return std::nullopt;
  return PeerCertificate{core::tls::certificate_names(cert)};
}

// How often a connection in line for a handshake slot looks whether its client is still there.
constexpr std::chrono::seconds kLineCheck{1};

// The client has closed its end (its FIN, or a reset, is in): nothing it sent will be answered.
bool peer_gave_up(int fd) {
  pollfd pfd{fd, POLLRDHUP, 0};
  return ::poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace

struct Listener::State {
  ListenerOptions options;
  AcceptHandler on_accept;
  CloseHandler on_close;
  std::mutex mu;
  std::condition_variable all_closed;
  std::shared_ptr<asio::ssl::context> tls;
  std::unordered_map<uint64_t, std::shared_ptr<Session>> sessions;
  uint64_t next_id = 0;
  ListenerStats stats;
  bool stopped = false;
  size_t handshake_bound = 0;                 // 0: none
  std::chrono::steady_clock::time_point last_accept_error_log{};
  uint64_t accept_errors_unlogged = 0;

  std::deque<std::weak_ptr<Session>> waiting;  // for a slot, oldest first (under mu)

  // A TLS connection whose client spoke asks for a handshake slot: true, it holds one now;
  // false, it is in line, and a slot that frees is handed to it (Session::slot_granted).
  bool take_slot(const std::shared_ptr<Session>& session);
  // A slot holder's handshake ended or outlasted its hold: the slot goes to the newest in line.
  void release_slot();

  void forget(uint64_t id) {
    std::lock_guard lock(mu);
    sessions.erase(id);
    stats.open = sessions.size();
    if (sessions.empty()) all_closed.notify_all();
  }
  void count(uint64_t ListenerStats::*field) {
    std::lock_guard lock(mu);
    ++(stats.*field);
  }
};

// One accepted connection, on its worker: every method runs there.
class Listener::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<State> state, core::io::WorkerPool::Placement placement,
          std::shared_ptr<asio::ssl::context> tls, uint64_t id)
      : lease_(std::move(placement.lease)),
        ctx_(placement.ctx),
        state_(std::move(state)),
        tls_(std::move(tls)),
        timer_(ctx_) {
    peer_.id = id;
    peer_.tls = tls_ != nullptr;
  }

  template <typename Socket>
  void begin(Socket socket) {
    fd_ = socket.native_handle();
    std::error_code ec;
    if constexpr (std::is_same_v<Socket, asio::ip::tcp::socket>) {
      socket.set_option(asio::ip::tcp::no_delay(true), ec);
      const auto ep = socket.remote_endpoint(ec);
      peer_.address = ec ? std::string("unknown") : address_text(ep);
    } else {
      peer_.unix_socket = true;
      peer_.address = "unix";
    }
    log_name_ = fmt::format("{} {}", state_->options.name, peer_.address);
    if (peer_.unix_socket) log_name_ += fmt::format(" #{}", peer_.id);
    if (tls_) {
      auto t = std::make_unique<TlsTransport<Socket>>(std::move(socket), *tls_);
      ssl_ = t->native_handle();
      transport_ = std::move(t);
    } else {
      transport_ = std::make_unique<SocketTransport<Socket>>(std::move(socket));
    }
    deadline_ = std::chrono::steady_clock::now() + state_->options.handshake_timeout;
    arm(deadline_);
    if (stopping_) {
      close("the listener is stopping");
      return;
    }
    if (!tls_) {
      transport_->async_handshake(
          true, [self = shared_from_this()](std::error_code e) { self->on_handshake(e); });
      return;
    }
    transport_->async_wait_readable([self = shared_from_this()](std::error_code e) {
      if (self->done_) return;
      if (e) {
        self->close("the client closed before its handshake");
        return;
      }
      if (self->state_->take_slot(self)) {
        self->start_handshake();
      } else {
        // In line: the wait is the server's doing, so the client's deadline stops; a line that
        // never moves still ends, and holds no descriptor for good.
        self->in_line_ = true;
        self->arm(std::min(self->line_deadline(), std::chrono::steady_clock::now() + kLineCheck));
      }
    });
  }

  // Given a slot that freed (any thread): the handshake begins on this connection's worker,
  // with a deadline from now (the wait in line was the server's doing, not the client's), unless
  // the client gave up while it waited.
  void slot_granted() {
    asio::post(ctx_, [self = shared_from_this()] {
      self->in_line_ = false;
      self->handshaking_ = true;  // it holds the slot: close() or the handshake frees it
      if (!self->done_ && self->close_if_abandoned()) return;
      self->deadline_ = std::chrono::steady_clock::now() + self->state_->options.handshake_timeout;
      self->start_handshake();
    });
  }

  asio::io_context& context() { return ctx_; }

  void shutdown() {
    stopping_ = true;
    if (conn_) {
      auto conn = conn_;
      conn->shutdown();
    } else if (transport_) {
      close("the listener is stopping");
    }
  }

  void close(const std::string& reason) {
    if (done_) return;
    if (conn_) {
      auto conn = conn_;
      conn->close(reason);  // on_close finishes
      return;
    }
    if (transport_) transport_->close();
    finish();
  }

 private:
  void on_handshake(std::error_code ec) {
    if (done_) return;
    end_handshake();
    if (ec) {
      state_->count(&ListenerStats::handshake_failures);
      KONN_LOG(listener_logger(), info, "{}: TLS handshake failed: {}", log_name_,
               ec == std::errc::protocol_not_supported
                   ? std::string("the client did not offer ALPN h2")
                   : ec.message());
      close("TLS handshake failed");
      return;
    }
    if (peer_.tls) peer_.certificate = peer_certificate(ssl_);
    ConnectionOptions options = state_->options.connection;
    options.log_name = log_name_;
    conn_ = Connection::create(Connection::Role::Server, std::move(transport_), std::move(options));
    Connection::CallHandler handler;
    if (state_->on_accept) handler = state_->on_accept(conn_, peer_);
    if (!handler) {
      KONN_LOG(listener_logger(), info, "{}: refused by its owner", log_name_);
      auto conn = std::exchange(conn_, nullptr);
      conn->close("refused");
      finish();
      return;
    }
    state_->count(&ListenerStats::accepted);
    conn_->set_call_handler(std::move(handler));
    conn_->set_on_close([self = shared_from_this()](const std::string& reason) {
      if (self->state_->on_close) self->state_->on_close(self->peer_, reason);
      self->finish();
    });
    auto conn = conn_;
    conn->start();
    if (stopping_) conn->shutdown();
  }

  // Holding a slot: the TLS handshake, with the slot's hold as the timer's first stop.
  void start_handshake() {
    handshaking_ = true;
    if (done_) {  // closed while it waited in line: the slot goes on
      end_handshake();
      return;
    }
    arm(std::min(deadline_, std::chrono::steady_clock::now() + state_->options.handshake_slot_hold));
    transport_->async_handshake(
        true, [self = shared_from_this()](std::error_code e) { self->on_handshake(e); });
  }

  void arm(std::chrono::steady_clock::time_point at) {
    timer_.expires_at(at);
    timer_.async_wait([weak = weak_from_this()](std::error_code e) {
      auto self = weak.lock();
      if (!e && self) self->on_timer();
    });
  }

  // The slot's hold ran out (the handshake goes on without it), or the deadline came (the
  // client's, or the line's).
  void on_timer() {
    if (done_ || (conn_ && conn_->peer_settings_received())) return;
    if (in_line_) {
      // A client that gave up frees its descriptor now, not when its turn comes: under a storm
      // it reconnects meanwhile, and the dead connections would fill the process's descriptors.
      if (close_if_abandoned()) return;
      const auto now = std::chrono::steady_clock::now();
      if (now < line_deadline()) {
        arm(std::min(line_deadline(), now + kLineCheck));
        return;
      }
    }
    if (!in_line_ && std::chrono::steady_clock::now() < deadline_) {
      if (handshaking_) state_->count(&ListenerStats::slot_hold_expiries);
      end_handshake();
      arm(deadline_);
      return;
    }
    state_->count(&ListenerStats::handshake_timeouts);
    if (state_->options.on_handshake_timeout) state_->options.on_handshake_timeout();
    KONN_LOG(listener_logger(), info, "{}: no handshake within {} ms, closed", log_name_,
             state_->options.handshake_timeout.count());
    close("handshake timeout");
  }

  // A client that gave up while its connection waited in line: closed unread, and counted.
  bool close_if_abandoned() {
    if (!peer_gave_up(fd_)) return false;
    state_->count(&ListenerStats::abandoned);
    close("the client gave up waiting for its handshake");
    return true;
  }

  std::chrono::steady_clock::time_point line_deadline() const {
    return deadline_ - state_->options.handshake_timeout + state_->options.handshake_line_timeout;
  }

  // Frees this connection's handshake slot, once.
  void end_handshake() {
    if (std::exchange(handshaking_, false)) state_->release_slot();
  }

  void finish() {
    if (done_) return;
    done_ = true;
    end_handshake();
    timer_.cancel();
    // Released after the handler that ended it (the Connection may be inside its own close()).
    asio::post(ctx_, [self = shared_from_this()] { self->conn_.reset(); });
    state_->forget(peer_.id);
  }

  core::io::DescriptorReserve::Lease lease_;  // first: released after the sockets
  asio::io_context& ctx_;
  std::shared_ptr<State> state_;
  std::shared_ptr<asio::ssl::context> tls_;
  asio::steady_timer timer_;  // the slot's hold, then the deadline
  // Accept + handshake_timeout; from its slot instead when it waited in line.
  std::chrono::steady_clock::time_point deadline_;
  int fd_ = -1;  // the socket's (owned by transport_, then the Connection)
  PeerInfo peer_;
  std::string log_name_;
  std::unique_ptr<Transport> transport_;  // until the Connection takes it
  SSL* ssl_ = nullptr;
  std::shared_ptr<Connection> conn_;
  bool stopping_ = false;
  bool done_ = false;
  bool handshaking_ = false;  // holds a handshake slot (State::stats.handshaking)
  bool in_line_ = false;      // waits for one (State::waiting)
};

bool Listener::State::take_slot(const std::shared_ptr<Session>& session) {
  std::lock_guard lock(mu);
  if (handshake_bound != 0 && (stats.handshaking >= handshake_bound || !waiting.empty())) {
    // Those that gave up or timed out while they waited leave from the old end.
    while (!waiting.empty() && waiting.front().expired()) waiting.pop_front();
    waiting.push_back(session);
    ++stats.admission_waits;
    return false;
  }
  stats.handshaking_peak = std::max(stats.handshaking_peak, ++stats.handshaking);
  return true;
}

void Listener::State::release_slot() {
  std::shared_ptr<Session> next;
  {
    std::lock_guard lock(mu);
    --stats.handshaking;
    // Newest first: under a storm the line outlasts clients' patience, and the oldest in it
    // would give up in the middle of the handshake it was given (its CPU spent for nothing);
    // the newest has its whole time ahead. Those left behind wait on: the ones whose client
    // gave up are closed unread when their turn comes, or at the line's deadline.
    while (!next && !waiting.empty()) {
      next = waiting.back().lock();
      waiting.pop_back();
    }
    if (next) ++stats.handshaking;  // handed on: the count does not dip
  }
  if (next) next->slot_granted();
}

Listener::Listener(asio::io_context& accept_ctx, core::io::WorkerPool& pool,
                   ListenerOptions options, AcceptHandler on_accept, CloseHandler on_close)
    : accept_ctx_(accept_ctx), pool_(pool), state_(std::make_shared<State>()) {
  state_->options = std::move(options);
  state_->on_accept = std::move(on_accept);
  state_->on_close = std::move(on_close);
  state_->handshake_bound = state_->options.max_handshakes_per_worker * pool.size();
}

size_t Listener::handshake_bound() const { return state_->handshake_bound; }

Listener::~Listener() { stop(std::chrono::milliseconds(0)); }

void Listener::set_tls_context(std::shared_ptr<asio::ssl::context> ctx) {
  if (ctx) enable_h2_alpn(*ctx);
  std::lock_guard lock(state_->mu);
  state_->tls = std::move(ctx);
}

void Listener::listen_tcp(const std::string& host, uint16_t port) {
  auto listening = core::net::listen_tcp(accept_ctx_, host, port);
  port_ = listening.local_endpoint().port();
  KONN_LOG(listener_logger(), info, "{} listening on {}:{}", state_->options.name,
           host.empty() ? std::string("*") : host, port_);
  tcp_ = start_accepting(std::move(listening));
}

void Listener::listen_unix(const std::string& path, bool delete_existing, unsigned mode) {
  auto listening = core::net::listen_unix(accept_ctx_, path, delete_existing, mode);
  unix_path_ = path;
  KONN_LOG(listener_logger(), info, "{} listening on unix:{}", state_->options.name, path);
  unix_ = start_accepting(std::move(listening));
}

void Listener::reconsider_placement() {
  if (tcp_) tcp_->reconsider();
  if (unix_) unix_->reconsider();
}

template <typename Protocol>
std::shared_ptr<core::net::PlacedAcceptor<Protocol>> Listener::start_accepting(
    asio::basic_socket_acceptor<Protocol> listening) {
  // Only a placement hint is worth following; the pool's own choice moves on every connection.
  const bool follow = static_cast<bool>(state_->options.place);
  auto place = [state = state_, &pool = pool_] {
    return state->options.place ? state->options.place() : pool.place();
  };
  auto on_accept = [state = state_](typename Protocol::socket socket,
                                    core::io::WorkerPool::Placement placement) {
    begin(state, std::move(socket), std::move(placement));
  };
  auto on_error = [state = state_](const std::error_code& ec) {
    // Out of descriptors, most likely: the acceptor waits 100 ms rather than spin, and says so
    // at most once in 10 s (a full process would otherwise log ten lines a second).
    const auto now = std::chrono::steady_clock::now();
    uint64_t unlogged = 0;
    {
      std::lock_guard lock(state->mu);
      ++state->stats.accept_errors;
      if (state->last_accept_error_log != std::chrono::steady_clock::time_point{} &&
          now - state->last_accept_error_log < std::chrono::seconds(10)) {
        ++state->accept_errors_unlogged;
        return;
      }
      state->last_accept_error_log = now;
      unlogged = std::exchange(state->accept_errors_unlogged, 0);
    }
    KONN_LOG(listener_logger(), warn,
             "{}: accept: {}; retrying every 100 ms ({} more failures since the last line)",
             state->options.name, ec.message(), unlogged);
  };
  auto acceptor = std::make_shared<core::net::PlacedAcceptor<Protocol>>(
      accept_ctx_, std::move(listening), follow, std::move(place), std::move(on_accept),
      std::move(on_error));
  acceptor->start();
  return acceptor;
}

template <typename Socket>
void Listener::begin(const std::shared_ptr<State>& state, Socket socket,
                     core::io::WorkerPool::Placement placement) {
  // A client that gave up while its connection waited in the listen backlog (its connect
  // timeout ran out under a storm) has already sent its FIN: closed here, before a TLS
  // handshake would spend a slot and a signature on it.
  if (peer_gave_up(socket.native_handle())) {
    state->count(&ListenerStats::abandoned);
    std::error_code ignored;
    socket.close(ignored);
    return;
  }
  std::shared_ptr<Session> session;
  uint64_t refused = 0;
  {
    std::lock_guard lock(state->mu);
    const auto max = state->options.max_connections;
    if (max != 0 && state->sessions.size() >= max) {
      refused = ++state->stats.refused;
    } else {
      session =
          std::make_shared<Session>(state, std::move(placement), state->tls, ++state->next_id);
      state->sessions.emplace(state->next_id, session);
      state->stats.open = state->sessions.size();
    }
  }
  if (!session) {
    // One line per hundred refusals: a flood of connections is not also a flood of logs.
    if (refused % 100 == 1) {
      KONN_LOG(listener_logger(), warn, "{}: {} connections open, one more refused ({} so far)",
               state->options.name, state->options.max_connections, refused);
    }
    std::error_code ignored;
    socket.close(ignored);
    return;
  }
  // Inline when the acceptor followed the placement here; else the connection's worker.
  asio::dispatch(session->context(), [session, s = std::move(socket)]() mutable {
    session->begin(std::move(s));
  });
}

ListenerStats Listener::stats() const {
  std::lock_guard lock(state_->mu);
  return state_->stats;
}

void Listener::stop_accepting() {
  if (tcp_) tcp_->stop();
  if (unix_) unix_->stop();
  if (!unix_path_.empty()) {
    std::error_code ignored;
    std::filesystem::remove(unix_path_, ignored);
    unix_path_.clear();
  }
}

void Listener::shutdown_connections() {
  std::vector<std::shared_ptr<Session>> sessions;
  {
    std::lock_guard lock(state_->mu);
    for (auto& [id, s] : state_->sessions) sessions.push_back(s);
  }
  for (auto& s : sessions) {
    auto& ctx = s->context();
    asio::post(ctx, [s] { s->shutdown(); });
  }
}

void Listener::close_connections(const std::string& reason) {
  std::vector<std::shared_ptr<Session>> sessions;
  {
    std::lock_guard lock(state_->mu);
    for (auto& [id, s] : state_->sessions) sessions.push_back(s);
  }
  for (auto& s : sessions) {
    auto& ctx = s->context();
    asio::post(ctx, [s, reason] { s->close(reason); });
  }
}

bool Listener::wait_closed(std::chrono::milliseconds timeout) {
  std::unique_lock lock(state_->mu);
  return state_->all_closed.wait_for(lock, timeout, [this] { return state_->sessions.empty(); });
}

void Listener::stop(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopped) return;
    state_->stopped = true;
  }
  stop_accepting();
  shutdown_connections();
  if (wait_closed(grace)) return;
  close_connections("the server is stopping");
  if (!wait_closed(std::chrono::seconds(5))) {
    KONN_LOG(listener_logger(), warn, "{}: {} connections still open after stop", state_->options.name,
             stats().open);
  }
}

}  // namespace konn::core::h2
