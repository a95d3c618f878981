#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <spdlog/logger.h>

#include "core/endpoint/endpoint_stats.h"
#include "core/io/asio_compat.h"
#include "core/io/descriptor_reserve.h"
#include "core/net/destination_policy.h"
#include "core/relay/read_gate.h"
#include "core/relay/write_role.h"
#include "core/tunnel/packet_stream.h"
#include "core/tunnel/socket_reader.h"
#include "core/tunnel/tunnel_life.h"

namespace konn::core::endpoint {

class ConnectionTable;

// Per-connection limits; the defaults are what the agent runs with.
struct EndpointSettings {
  std::chrono::milliseconds dial_timeout{5000};
  // Where dials may go (--allowed-destinations), checked on every resolved address; null: all.
  std::shared_ptr<const core::net::DestinationPolicy> destinations;
  // The server announced konn-flow-control: reads stop when the tunnel's window is used up, and
  // credit is returned with KONN_WINDOW_UPDATE. Without it neither happens.
  bool flow_control = false;
  // The DIAL_REQ asked for konn's half-close: the endpoint's EOF is sent as KONN_CLOSE_WRITE
  // (reading from the server goes on), and the server's KONN_CLOSE_WRITE shuts down our write
  // side once queued bytes are written. Without it an EOF closes the whole connection.
  bool half_close = false;
  // Stop reading the socket while more than this many of our bytes wait in the stream's queue;
  // resume below half of it.
  size_t queue_high_watermark = 1024 * 1024;
  // Bytes from the server waiting for the socket beyond which the connection is closed alone
  // (a peer without flow control cannot be slowed down any other way).
  size_t write_queue_cap = 16 * 1024 * 1024;
  // How long queued bytes may take to reach the socket once the connection is closing.
  std::chrono::milliseconds close_flush_timeout{5000};
  // Half-close: once one side finished sending, the connection is closed (CLOSE_RSP) when
  // nothing moved for this long (--half-close-timeout).
  std::chrono::nanoseconds half_close_timeout = std::chrono::seconds(30);
  // A node-to-control-plane tunnel (KEP-2025): every packet goes out as its KONN_NODE_* twin
  // (its ids live apart from the forward tunnels' on the same stream), and lines are logged under
  // the `node.tunnel` component. Used by the server for the destinations it dials for agents,
  // and by the agent for the connections its --node-to-control-plane-listen accepted.
  bool node_direction = false;
};

// One TCP connection the agent dialled for the server (an ANP "endpoint connection"), and the
// queues between it and its server stream. Each one counts in EndpointStats::endpoint_slots from
// construction to destruction (--max-endpoint-connections). It lives on one io_context: every
// public method may be called from any thread (the stream's reactions run on its connection's
// worker: in the agent usually this connection's own, on the server a server worker) and only
// posts work there; everything else runs on that context without locks. Async handlers hold
// shared_from_this().
//
// Endpoint -> server: wait for readability, then allocate and read up to kReadChunk, one DATA
// packet per read. Reading pauses while too many of our bytes wait in the stream (WriteListener
// tells when they leave) or, with flow control, while the window is used up.
// Server -> endpoint: DATA packets are queued and written from the packet's own bytes, one
// async_write (gathering several packets) in flight at a time. While that queue is empty the
// connection opens its WriteRole: the stream's thread then writes a small packet to the socket
// itself (no post, no wake-up of the worker), and anything that does not go out whole is posted as
// before.
//
// The tunnel's policy (state, watermark towards the server, credit both ways, write cap,
// half-close bound, close summary) is its TunnelLife; this class keeps the socket's I/O.
class EndpointConnection : public core::tunnel::WriteListener,
                           public std::enable_shared_from_this<EndpointConnection> {
 public:
  // Dialing (connect in progress; no DIAL_RSP sent yet) -> Established (DIAL_RSP sent, bytes
  // flow both ways) -> Closing (no more reads; queued writes are being flushed, bounded by a
  // deadline) -> Closed (socket closed and the connection left its table). Never Idle.
  using State = core::tunnel::TunnelLife::State;

  // What the agent's status page shows of this connection. Any thread (a short lock and atomics).
  struct Status {
    std::string destination;
    std::chrono::steady_clock::time_point started;
    uint64_t bytes_from_endpoint = 0;
    uint64_t bytes_to_endpoint = 0;
  };
  Status status() const;

  EndpointConnection(asio::io_context& ctx, std::shared_ptr<core::tunnel::PacketStream> stream,
                     std::shared_ptr<ConnectionTable> table, int64_t connect_id, int64_t dial_id,
                     std::string server_id, const EndpointSettings& settings,
                     std::shared_ptr<EndpointStats> stats,
                     core::io::DescriptorReserve::Lease lease = {});
  ~EndpointConnection() override;

  // Dials `address` ("host:port"); answers DIAL_RSP with the connectID or the dial's error.
  // Call once, after the connection was added to its table.
  void start(std::string address);
  // The dialling side of a node-to-control-plane tunnel (the agent): `socket` was accepted on a
  // --node-to-control-plane-listen address and lives on this connection's io_context. Sends
  // KONN_NODE_DIAL_REQ for `address` (empty: the server's first destination) with our dial id
  // and waits for dial_answered(). Call once (instead of start()), after the connection was
  // added to its table by dial id.
  void start_accepted(asio::ip::tcp::socket socket, std::string address);
  // The answer to start_accepted()'s dial (without one within 30 s the connection gives up and
  // sends KONN_NODE_DIAL_CLS). On success the caller has already made the
  // connection findable by `connect_id` (ConnectionTable::establish), before the next packet of
  // the stream is read.
  void dial_answered(int64_t connect_id, std::string error);
  // KONN_NODE_CLOSE: the peer closed its side of the tunnel and forgot it. Queued bytes are
  // flushed, the socket closed, and nothing is answered.
  void peer_closed(std::string error);
  // A DATA packet from the server for this connection.
  void deliver(Packet&& data);
  // CLOSE_REQ: flush what is queued, close, answer CLOSE_RSP.
  void close_request();
  // DIAL_CLS: stop a dial still in progress (no DIAL_RSP is sent), or close the connection.
  void cancel_dial();
  // KONN_CLOSE_WRITE: the server sends no more DATA; shut down our write side after the queue.
  void close_write();
  // KONN_WINDOW_UPDATE: the server consumed `bytes` more of ours.
  void add_credit(int64_t bytes);
  // The stream ended: close at once; no packet can be sent any more. In node direction the
  // socket is reset (SO_LINGER 0), so its client sees the tunnel break.
  void abandon();

  // WriteListener: `data_bytes` of our DATA left the stream's queue (the stream's thread).
  void on_written(size_t data_bytes) override;

  int64_t connect_id() const { return connect_id_; }
  bool accepted() const { return accepted_.load(); }
  int64_t dial_id() const { return dial_id_; }
  // "[C<connectID> D<dialID> S<serverID>] " for KONN_CONN_LOG.
  const std::string& log_prefix() const { return prefix_; }

 private:
  enum class CloseFlags : unsigned {
    None = 0,
    SendCloseResponse = 1,  // tell the server with CLOSE_RSP
    Flush = 2,              // let queued writes reach the socket first
    Routine = 4,            // an ordinary end: a forward tunnel's is logged at debug
  };
  friend CloseFlags operator|(CloseFlags a, CloseFlags b) {
    return static_cast<CloseFlags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
  }
  static bool has(CloseFlags set, CloseFlags f) {
    return (static_cast<unsigned>(set) & static_cast<unsigned>(f)) != 0;
  }

  // Everything below runs on ctx_ only.
  spdlog::logger& logger() const;
  // Queues `p` on the stream, as its KONN_NODE_* twin for a node-to-control-plane tunnel.
  bool send_packet(Packet&& p, std::shared_ptr<core::tunnel::WriteListener> listener = nullptr);
  std::string make_prefix() const;
  // The tunnel's policy and its half-close bound; from start() or start_accepted().
  void configure_life();
  // Ends a dial that has not been answered: the dialled side stops its connect; the dialling
  // side (accepted) tells the peer with KONN_NODE_DIAL_CLS when `tell_peer` and closes.
  void stop_dial(const std::string& reason, bool tell_peer);
  // Dials an IP literal with callbacks (what kube-apiserver sends almost always: no coroutine
  // frame, no parallel group), bounded by settings_.dial_timeout and stopped by DIAL_CLS.
  void connect(const asio::ip::tcp::endpoint& to, std::string address);
  // Dials a host name: looks it up and tries its addresses (core::net::dial_tcp).
  core::io::Awaitable<void> dial(std::string address);
  // The dial's outcome (socket_ connected when `ec` is empty): DIAL_RSP, then reading.
  void dialled(std::error_code ec, const std::string& error_text);
  void end_cancelled_dial();
  // Reading the endpoint: wait until it is readable (or the gate opens), read what is there,
  // send it as DATA, wait again. Until the connection leaves Established.
  void read_next();
  void read_ready(std::error_code wait_ec);
  void enqueue_write(Packet&& data);
  void write_next();
  void on_socket_written(std::error_code ec, size_t n);
  // Our DATA left the stream's queue far enough for a paused read loop to go on.
  void resume_if_drained();
  // Bytes written to the socket, by the worker or directly (any thread): counters and, with flow
  // control, the credit returned to the server.
  void written_to_socket(size_t n, bool return_credit);
  void pause(core::relay::PauseReason reason);
  void resume(core::relay::PauseReason reason);
  // First call wins; later calls return. `error` goes into CLOSE_RSP.
  void close(const std::string& reason, CloseFlags flags, const std::string& error = {});
  void finish_close();
  void set_state(State s);
  State state() const { return life_.state(); }
  // Half-close: the endpoint reached EOF (sent KONN_CLOSE_WRITE), or the server did (our write
  // side is shut down once the queue is empty). Both: the connection closes with CLOSE_RSP.
  void endpoint_eof();
  void maybe_shutdown_write();
  // The first side to finish starts --half-close-timeout and counts the connection in
  // half_closed_endpoint_connections until it closes.
  void one_side_finished(core::tunnel::TunnelLife::Side side);
  // Closing: the bound stops and the connection leaves half_closed_endpoint_connections (once;
  // from close(), finish_close() or the destructor, whichever comes first).
  void end_half_close();

  // The socket's descriptor state on ctx_ (WorkerPool::place). First, so it is returned last.
  core::io::DescriptorReserve::Lease lease_;
  asio::io_context& ctx_;
  std::shared_ptr<core::tunnel::PacketStream> stream_;
  std::shared_ptr<ConnectionTable> table_;
  // Set once: at construction, or for an accepted connection by dial_answered() on ctx_ before
  // the connection is findable by it (no other thread reads it earlier).
  int64_t connect_id_;
  const int64_t dial_id_;
  const std::string server_id_;
  const EndpointSettings settings_;
  std::shared_ptr<EndpointStats> stats_;
  std::string prefix_;                 // rebuilt once with connect_id_
  std::atomic<bool> accepted_{false};  // start_accepted(): we dial through the peer

  // State, the watermark and credit counters, the half-close bound (touched from any thread
  // whenever bytes move), the close reason and the byte counts (atomic: status() reads them).
  // Its policy is set in start() or start_accepted(), before any DATA can arrive.
  core::tunnel::TunnelLife life_{State::Dialing};
  asio::ip::tcp::socket socket_;
  core::tunnel::SocketReader reader_;  // the read loop's (ctx_ only)
  asio::steady_timer cancel_timer_;    // ends a dial: DIAL_CLS, or connect()'s deadline
  asio::steady_timer gate_timer_;      // the paused read loop waits on it; resume cancels it
  asio::steady_timer flush_timer_;     // bounds Closing
  bool dial_cancelled_ = false;
  bool dial_timed_out_ = false;  // connect(): the deadline passed first
  bool reset_ = false;           // node direction, stream gone: the socket is closed with a reset
  core::relay::ReadGate gate_;
  std::deque<Packet> writes_;  // DATA from the server; the first write_count_ are being written
  std::vector<asio::const_buffer> write_buffers_;
  size_t write_count_ = 0;
  bool writing_ = false;
  bool flushing_ = false;
  bool write_shut_ = false;     // half-close: our write side of the socket is shut down
  bool routine_close_ = false;  // CloseFlags::Routine was given
  mutable std::mutex status_mu_;
  std::string destination_;  // under status_mu_: set by start() or start_accepted()

  // Shared with the stream's thread (deliver, on_written).
  core::relay::WriteRole write_role_;
  std::atomic<int64_t> pending_writes_{0};  // bytes posted but not yet written to the socket
  std::atomic<bool> overflowed_{false};
};

}  // namespace konn::core::endpoint
