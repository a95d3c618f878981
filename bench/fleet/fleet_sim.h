#pragma once

// The fleet simulator's agents (issue 42): one process holds many Konnectivity agent connections,
// each a TLS connection with one AgentService/Connect stream, as upstream's proxy-agent opens
// it, and answers the server's packets in process.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ssl/context.hpp>
#include <asio/steady_timer.hpp>

#include "core/h2/connection.h"

class Packet;

namespace konn::bench::fleet {

// Counters shared by every agent of a process (any thread).
struct Counters {
  std::atomic<uint64_t> connected{0};         // streams whose response headers came, still open
  std::atomic<uint64_t> connects{0};          // streams accepted since start
  std::atomic<uint64_t> reconnects{0};        // accepted again after a lost stream
  std::atomic<uint64_t> connect_failures{0};  // attempts that ended before response headers
  std::atomic<uint64_t> handshakes{0};        // TLS handshakes completed (client side)
  std::atomic<uint64_t> dials{0};             // DIAL_REQ answered with a connectID
  std::atomic<uint64_t> dial_failures{0};     // DIAL_REQ answered with an error
  std::atomic<uint64_t> tunnels_open{0};
  std::atomic<uint64_t> data_packets{0};  // DATA received from the server
  std::atomic<uint64_t> closes{0};        // CLOSE_REQ answered
  std::atomic<uint64_t> drains{0};        // DRAIN sent
};

// The backoff of upstream's agent (its ClientSet sync loop): the first attempt after a lost
// connection comes at its next sync tick (within one `initial`, jittered), each failure after
// waits `initial`, then 1.5x more, up to `cap`, each with up to 10 % jitter added; a success
// resets it.
class UpstreamBackoff {
 public:
  UpstreamBackoff(std::chrono::milliseconds initial, std::chrono::milliseconds cap, uint64_t seed);
  // The wait before the first attempt after a lost connection (a point of the sync tick).
  std::chrono::milliseconds first();
  // The wait after a failed attempt.
  std::chrono::milliseconds next();
  void reset() { current_ = initial_; }

 private:
  std::chrono::milliseconds jittered(std::chrono::milliseconds d);
  std::chrono::milliseconds initial_;
  std::chrono::milliseconds cap_;
  std::chrono::milliseconds current_;
  std::mt19937_64 rng_;
};

struct AgentConfig {
  std::string server_host = "127.0.0.1";
  uint16_t server_port = 0;
  // TLS client context (CA, client certificate); null: h2c (tests only).
  std::shared_ptr<asio::ssl::context> tls;
  std::string token;                       // sent as "authorization: Bearer <token>" when set
  std::string authority;                   // :authority (upstream's agent sends host:port)
  std::chrono::milliseconds keepalive{0};  // PINGs (upstream's default is 1 h: none in a run)
  std::chrono::milliseconds backoff_initial{1000};  // upstream --sync-interval
  std::chrono::milliseconds backoff_cap{10000};     // upstream --sync-interval-cap
  std::chrono::milliseconds connect_timeout{20000};
  // DIAL_REQ: false answers in process (the tunnel echoes DATA); true dials the address.
  bool dial_real = false;
  std::chrono::milliseconds dial_timeout{5000};  // upstream's agent: 5 s
};

// One simulated agent. Lives on one io_context thread; every method but the constructor must be
// called there (post to it).
class SimAgent : public std::enable_shared_from_this<SimAgent> {
 public:
  SimAgent(asio::io_context& io, const AgentConfig& cfg, std::string id, std::string identifiers,
           std::string source_address, Counters& counters, uint64_t seed);
  ~SimAgent();
  // Connects now, and again (upstream's backoff) whenever the stream ends, until stop().
  void start();
  void stop();
  // Sends DRAIN on the open stream (the server routes no new dial here unless all drain).
  void drain();
  bool connected() const { return accepted_; }
  const std::string& id() const { return id_; }
  size_t tunnels() const { return tunnels_.size(); }

 private:
  struct Tunnel;
  void attempt();
  void on_tcp_connected(asio::ip::tcp::socket socket);
  void on_stream_end(const core::h2::GrpcStatus& status);
  void retry_after(std::chrono::milliseconds d);
  void on_packet(const std::string& bytes);
  void send(const Packet& p);
  void dial_real(int64_t random, const std::string& address);
  void tunnel_read(int64_t id);
  void tunnel_closed(int64_t id, bool notify);

  asio::io_context& io_;
  const AgentConfig& cfg_;
  std::string id_;
  std::string identifiers_;
  std::string source_;
  Counters& counters_;
  UpstreamBackoff backoff_;
  asio::steady_timer timer_;
  std::shared_ptr<core::h2::Connection> conn_;
  std::shared_ptr<core::h2::Stream> stream_;
  std::unique_ptr<asio::ip::tcp::socket> connecting_;
  uint64_t generation_ = 0;  // bumps with each attempt: stale handlers see it
  bool stopped_ = false;
  bool accepted_ = false;
  bool ever_accepted_ = false;
  int64_t next_connect_id_ = 1;
  std::unordered_map<int64_t, std::shared_ptr<Tunnel>> tunnels_;
};

// "host=node-<i>&ipv4=<10.x.y.z>", the identifiers of the i-th agent.
std::string agent_identifiers(uint64_t index);
std::string agent_ipv4(uint64_t index);

}  // namespace konn::bench::fleet
