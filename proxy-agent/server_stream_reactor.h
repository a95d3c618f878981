#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <asio/io_context.hpp>

#include "core/endpoint/connection_table.h"
#include "core/endpoint/endpoint_connection.h"
#include "core/h2/connection.h"
#include "core/io/asio_compat.h"
#include "core/io/worker_pool.h"
#include "core/tunnel/packet_stream.h"
#include "proxy-agent/agent_stats.h"
#include "proxy-agent/egress_proxy.h"
#include "proxy-agent/server_connector.h"

namespace konn::agent {

// What one connection attempt sends and needs.
struct StreamConfig {
  std::string target;  // host:port of the proxy-server (IPv6 in brackets): server.address()
  // Where and how to connect: host, port, egress proxy, TLS context, --server-connect-timeout.
  ServerConnectTarget server;
  // A PING every `keepalive` (0: none); the connection closes when its ACK does not come.
  std::chrono::milliseconds keepalive{0};
  std::string agent_id;
  std::string agent_identifiers;  // sent always, maybe empty
  std::string token;              // raw file contents; empty: no authorization header
  core::endpoint::EndpointSettings endpoint;  // flow_control is decided per stream from the headers
  // --max-endpoint-connections (0: no limit), over every stream (AgentStats::endpoint_slots).
  int64_t max_endpoint_connections = 0;
  // Node to control plane: announce konn-node-to-control-plane (the agent has
  // --node-to-control-plane-listen addresses). Its tunnels count in `node_stats`.
  bool node_to_control_plane = false;
  core::endpoint::EndpointSettings node_endpoint;
  std::shared_ptr<AgentStats> node_stats;
};

// What the server's response headers said.
struct Handshake {
  bool ok = false;  // exactly one serverid and a decimal servercount
  std::string server_id;
  int64_t server_count = 0;
  bool flow_control = false;  // the server announced konn-flow-control: 1
  // The server confirmed konn-node-to-control-plane: 1 (node tunnels may use this stream).
  bool node_to_control_plane = false;
  std::string error;  // why not ok
};

// The agent's end of one AgentService/Connect stream to one proxy-server (an upstream "client"
// of the ClientSet), on its own HTTP/2 connection (core/h2; TLS, ALPN h2, through an egress
// proxy when configured). It sends agentid/agentidentifiers/authorization and konn-flow-control
// in the request headers, waits for serverid/servercount, then serves DIAL_REQ, DATA, CLOSE_REQ,
// DIAL_CLS and KONN_WINDOW_UPDATE. Delivery to an endpoint connection either writes its socket at
// once (WriteRole) or posts to the connection's io_context: a reaction never waits on a socket
// (no head-of-line blocking).
//
// Threads: the connection lives on one worker of the agent's pool (its home), and so do the
// endpoint connections of its tunnels. That thread reads the connection's bytes into nghttp2,
// runs each packet's reaction inline, and writes what the stream queued; an endpoint's packets
// for the server are handed to the stream on the same thread, with no post. Only what comes from
// elsewhere (node-to-control-plane connections, ServerSet's calls) is posted to the home worker:
// PacketStream's write, read, finish and cancel operations all run there. PacketStream keeps its
// contract: at most one read and one write outstanding, and OnDone once the call's status is
// known, the connection is done with the stream and the finish operation (our half-close) was
// issued.
//
// Lifetime: create() returns a shared_ptr; the reactor also holds itself until OnDone. Owners
// (ServerSet) keep shared_ptrs.
class ServerStreamReactor : public core::tunnel::PacketStream {
 public:
  // Runs on the home thread once the headers were checked. Returns true to keep the stream
  // (reads start), false to drop it (e.g. a duplicate server id).
  using HandshakeCallback =
      std::function<bool(const std::shared_ptr<ServerStreamReactor>&, const Handshake&)>;
  // Runs once, as the last act of OnDone: the call is over and no callback of it will run
  // again. `handshake_failed` is true when the stream was never kept (no connection, bad
  // headers, a failed call, or dropped by HandshakeCallback); `why` says what happened. It
  // receives the reactor's own reference; it runs on the home thread.
  using EndCallback = std::function<void(std::shared_ptr<ServerStreamReactor> self,
                                         bool handshake_failed, const std::string& why)>;

  // The connection lives on `home`'s worker (its lease covers the connection's socket), and so do
  // the endpoint connections of this stream.
  static std::shared_ptr<ServerStreamReactor> create(
      core::io::WorkerPool::Placement home, StreamConfig config, core::io::WorkerPool& pool,
      std::shared_ptr<AgentStats> stats, HandshakeCallback on_handshake, EndCallback on_end);
  ~ServerStreamReactor() override;

  // Connects and starts the call. Once.
  void start();
  // Sends DRAIN: the server stops routing new dials here; existing tunnels continue.
  void drain();
  // The HTTP/2 connection closed (probe): it broke, or a keepalive PING went unanswered.
  bool connection_lost() const;
  // Why connecting failed through the egress proxy, once the stream ended without a
  // connection; nullopt otherwise.
  std::optional<ProxyFailure> proxy_failure() const;
  // Endpoint connections of this stream (dialing or established).
  size_t connection_count() const { return table_->size(); }
  // The endpoint connections of this stream (the status page); any thread.
  std::vector<std::shared_ptr<core::endpoint::EndpointConnection>> connections() const {
    return table_->snapshot();
  }
  std::string server_id() const;
  bool flow_control() const;
  // The server confirmed the node-to-control-plane extension on this stream, and the stream has
  // not ended.
  bool node_ready() const;
  // Node-to-control-plane connections of this stream (asking or open).
  size_t node_connection_count() const { return node_table_->size(); }
  // Tunnels `socket` (accepted on a --node-to-control-plane-listen address, living on `ctx`, its
  // descriptor state held by `lease`) to the server, which dials `destination` (empty: its
  // first). Closes the socket when the stream can no longer take it.
  // Closes every node-to-control-plane connection of this stream, telling the server; takes no
  // new one (drain).
  void close_node_connections(const std::string& why);
  void open_node_tunnel(asio::ip::tcp::socket socket, const std::string& destination,
                        asio::io_context& ctx, core::io::DescriptorReserve::Lease lease);
  const std::string& target() const { return config_.target; }

  // Public only for make_shared; use create().
  ServerStreamReactor(core::io::WorkerPool::Placement home, StreamConfig config,
                      core::io::WorkerPool& pool, std::shared_ptr<AgentStats> stats,
                      HandshakeCallback on_handshake, EndCallback on_end);

 protected:
  // PacketStream.
  void start_write_op(const Packet* p, core::tunnel::WriteOptions opts) override;
  // The write of `p` on the home thread, once the stream exists.
  void write_packet(const Packet* p);
  void start_read_op(Packet* p) override;
  void start_finish_op(const core::h2::GrpcStatus& status) override;
  void cancel_op(const core::h2::GrpcStatus& status) override;
  void on_packet(Packet&& p) override;
  void on_read_end() override;
  void on_queued(const Packet& p) override;
  void on_write_failed(const Packet& p) override;

 private:
  core::io::Awaitable<void> connect_and_call();
  // h2 stream callbacks (home thread).
  void on_response_headers(const core::h2::Metadata& md);
  void on_message(std::string&& message);
  void on_stream_end(const core::h2::GrpcStatus& status);
  // Resets the stream (RST_STREAM CANCEL); its end follows.
  void cancel_stream();
  // Runs `fn` on the home worker's thread: at once when called there, else posted.
  template <typename Fn>
  void on_home_thread(Fn&& fn);
  // One of the two holds on OnDone (the stream's end, the finish operation) is released.
  void settle();
  void OnDone(const core::h2::GrpcStatus& status);

  std::shared_ptr<ServerStreamReactor> self_ptr();
  void handle_dial(const DialRequest& req);
  // A KONN_NODE_* packet, already turned into its forward twin.
  void handle_node_packet(Packet&& p);
  // Tears down every endpoint connection, once.
  void end(const std::string& why);
  std::string log_prefix() const;

  asio::io_context& home_;  // the worker that owns the connection and the endpoint sockets
  size_t home_index_;
  core::io::DescriptorReserve::Lease lease_;
  // Home thread only.
  std::shared_ptr<core::h2::Connection> conn_;
  std::shared_ptr<core::h2::Stream> stream_;
  Packet* read_target_ = nullptr;    // the outstanding read's packet
  std::optional<std::string> held_;  // a message that came while no read was outstanding
  bool write_outstanding_ = false;   // a packet handed to the stream, not yet taken by HTTP/2
  bool stream_over_ = false;         // the stream ended (or never started)
  int holds_ = 2;                    // the stream's end and the finish operation
  bool discarding_ = false;          // cancelled: messages still delivered are dropped
  bool parse_failed_ = false;        // a message that is no Packet: the call fails INTERNAL
  bool headers_seen_ = false;
  const Packet* deferred_write_ = nullptr;  // a write asked for before the stream existed
  core::h2::GrpcStatus final_status_;
  std::atomic<bool> connection_lost_{false};
  const StreamConfig config_;
  core::io::WorkerPool& pool_;
  std::shared_ptr<AgentStats> stats_;
  std::shared_ptr<core::endpoint::ConnectionTable> table_ =
      std::make_shared<core::endpoint::ConnectionTable>();
  // Node-to-control-plane tunnels: by our dial id, then by the server's connectID.
  std::shared_ptr<core::endpoint::ConnectionTable> node_table_ =
      std::make_shared<core::endpoint::ConnectionTable>();
  HandshakeCallback on_handshake_;
  EndCallback on_end_;

  // Lock: mu_ guards the fields below; never held while calling into the stream or PacketStream.
  mutable std::mutex mu_;
  std::shared_ptr<ServerStreamReactor> self_;  // until OnDone
  std::string server_id_;
  bool flow_control_ = false;
  bool node_confirmed_ = false;
  bool accepted_ = false;
  bool ended_ = false;
  std::string handshake_error_;
  std::optional<ProxyFailure> proxy_failure_;
  std::chrono::steady_clock::time_point started_;

  // Stream errors (stream_errors_total), reported from OnDone once the status is known.
  std::atomic<bool> cancelled_by_us_{false};  // our own close(abort): not a stream error
  std::atomic<int> failed_write_type_{-1};    // the packet type of a failed write, if any
};

}  // namespace konn::agent
