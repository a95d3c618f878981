#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/ssl/context.hpp>
#include <asio/steady_timer.hpp>

#include "core/h2/connection.h"
#include "core/io/worker_pool.h"
#include "core/net/placed_acceptor.h"
#include "core/tls/certificate_names.h"

namespace konn::core::h2 {

// A client certificate the TLS context verified, as the owner needs it to authorize the peer
// (--verify-agent-identifiers=cert reads its names).
struct PeerCertificate {
  core::tls::CertificateNames names;  // its common name, DNS and IP subjectAltNames
};

// What the owner learns of a new connection.
struct PeerInfo {
  uint64_t id = 0;      // unique within the listener (log lines)
  std::string address;  // "127.0.0.1:41234", "[::1]:41234", or "unix"
  bool unix_socket = false;
  bool tls = false;
  std::optional<PeerCertificate> certificate;  // TLS, when the client presented one
};

struct ListenerOptions {
  std::string name = "h2-listener";  // log lines: "<name> <peer>"
  // Every connection's options: keepalive_interval sends the server's PINGs,
  // min_peer_ping_interval polices the client's. log_name is set per connection.
  ConnectionOptions connection;
  // Connections open at once (0: no limit). One beyond is closed as soon as it is accepted, and
  // counted (ListenerStats::refused).
  size_t max_connections = 0;
  // From accept to the client's first SETTINGS frame (TLS handshake and HTTP/2 preface): a
  // connection still short of it is closed and counted (ListenerStats::handshake_timeouts).
  std::chrono::milliseconds handshake_timeout{10000};
  // Told (on the connection's worker) of each connection closed at handshake_timeout, beside
  // ListenerStats::handshake_timeouts: a server counts it where its other limits are counted.
  std::function<void()> on_handshake_timeout;
  // Handshake admission: TLS handshakes in flight at most this many per pool worker (0: no
  // bound). A connection asks for a slot once its client's first bytes arrived (a client that
  // never speaks holds none) and waits in line, reading nothing, while every slot is taken; a
  // slot that frees goes to the newest in line, which has its whole deadline ahead. Under a
  // reconnect storm this keeps the handshakes begun short of handshake_timeout instead of
  // starting all of them and finishing none, and a connection that waits past its deadline costs
  // no handshake CPU.
  size_t max_handshakes_per_worker = 0;
  // A slot is held at most this long: a client that stalls mid-handshake (or a slow one) goes on
  // outside the bound, so stalled clients delay the line by this much, never shut it.
  std::chrono::milliseconds handshake_slot_hold{1000};
  // A connection in line for a slot is closed this long after accept (as a handshake timeout);
  // it meets handshake_timeout from the moment it has a slot.
  std::chrono::milliseconds handshake_line_timeout{60000};
  // Chooses the worker of the next connection (called before each accept, on the accept
  // context); empty: the pool's round robin. A server puts a connection beside the connections it
  // will most likely exchange packets with.
  std::function<core::io::WorkerPool::Placement()> place;
};

struct ListenerStats {
  uint64_t accepted = 0;            // connections handed to the owner
  uint64_t refused = 0;             // closed at once: max_connections reached
  uint64_t handshake_failures = 0;  // TLS handshake failed (bad certificate, no ALPN h2, ...)
  uint64_t handshake_timeouts = 0;
  uint64_t open = 0;  // accepted and not yet closed (any phase)
  uint64_t handshaking = 0;       // holding a handshake slot now (admission counts these)
  uint64_t handshaking_peak = 0;  // the most at once so far
  uint64_t admission_waits = 0;   // connections that waited in line for a slot
  uint64_t slot_hold_expiries = 0;  // handshakes that outlasted handshake_slot_hold
  uint64_t accept_errors = 0;     // accept() failed (EMFILE, ...): retried 100 ms later
  uint64_t abandoned = 0;  // the client had closed before it was accepted: closed unread
};

// A server of HTTP/2 Connections (server role) on one TCP address or unix socket, optionally
// TLS. Each accepted connection is placed on a worker of a core::io::WorkerPool with a
// descriptor lease it keeps for its life, and lives there: TCP_NODELAY, the TLS handshake (ALPN
// h2 required; client certificates as the context requests them), then a Connection whose
// CallHandler the owner gives once it has seen the peer.
//
// Thread-safety: the listen_*, set_tls_context, stats and stop methods may be called from any
// thread but a worker's or the accept context's (stop waits for them). Owner callbacks run on
// the connection's worker.
class Listener {
 public:
  // Called once per connection, after its TLS handshake, before any HTTP/2 frame is read: the
  // owner authorizes the peer and returns the connection's CallHandler (empty: the connection is
  // closed). The Connection may be kept (weakly) to post() to it or shut it down.
  using AcceptHandler =
      std::function<Connection::CallHandler(const std::shared_ptr<Connection>&, const PeerInfo&)>;
  // Called once for each connection the AcceptHandler accepted, when it closed.
  using CloseHandler = std::function<void(const PeerInfo&, const std::string& reason)>;

  // The acceptor starts on `accept_ctx` (which must run until stop() returned); connections live
  // on `pool`'s workers. With options.place, the acceptor follows the placement to its worker
  // (core/net/placed_acceptor.h), so the thread that serves a new connection is the one woken to
  // accept it; without, it stays on `accept_ctx`.
  Listener(asio::io_context& accept_ctx, core::io::WorkerPool& pool, ListenerOptions options,
           AcceptHandler on_accept, CloseHandler on_close = {});
  ~Listener();  // stop(0)
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // TLS for connections accepted from now on (null: h2c). The context gets ALPN h2
  // (enable_h2_alpn); its verify mode decides whether client certificates are requested or
  // required. Call before listening, and again to change certificates.
  void set_tls_context(std::shared_ptr<asio::ssl::context> ctx);

  // Binds and starts accepting. Throws std::system_error naming the address (core/net).
  void listen_tcp(const std::string& host, uint16_t port);
  void listen_unix(const std::string& path, bool delete_existing, unsigned mode);
  // With options.place: the placement it returns may have changed (an agent connected, say); an
  // accept already waiting is placed again (PlacedAcceptor::reconsider). Any thread.
  void reconsider_placement();
  // The bound on handshakes in flight: max_handshakes_per_worker times the pool's workers (0:
  // none).
  size_t handshake_bound() const;
  // The TCP port bound (0 before listen_tcp).
  uint16_t port() const { return port_; }

  ListenerStats stats() const;

  // Graceful stop, in steps: stop accepting; GOAWAY on every connection (Connection::shutdown;
  // a connection still in its handshake is closed); wait up to `grace` for them to close; close
  // the rest (their calls end UNAVAILABLE) and wait until they are gone. Idempotent.
  void stop(std::chrono::milliseconds grace);
  // The steps on their own.
  void stop_accepting();
  void shutdown_connections();
  // True when every connection closed within `timeout`.
  bool wait_closed(std::chrono::milliseconds timeout);
  void close_connections(const std::string& reason);

  // Internal (listener.cc): one accepted connection, and what the listener shares with them
  // (they may outlive it by the few handlers still queued on their workers).
  class Session;
  struct State;

 private:
  template <typename Protocol>
  std::shared_ptr<core::net::PlacedAcceptor<Protocol>> start_accepting(
      asio::basic_socket_acceptor<Protocol> listening);
  template <typename Socket>
  static void begin(const std::shared_ptr<State>& state, Socket socket,
                    core::io::WorkerPool::Placement placement);

  asio::io_context& accept_ctx_;
  core::io::WorkerPool& pool_;
  std::shared_ptr<State> state_;
  std::shared_ptr<core::net::PlacedAcceptor<asio::ip::tcp>> tcp_;
  std::shared_ptr<core::net::PlacedAcceptor<asio::local::stream_protocol>> unix_;
  std::string unix_path_;  // removed when accepting stops
  uint16_t port_ = 0;
};

}  // namespace konn::core::h2
