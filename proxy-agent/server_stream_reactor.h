#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/async_stream.h>

#include "core/io/worker_pool.h"
#include "core/tunnel/async_packet_stream.h"
#include "core/tunnel/completion_driver.h"
#include "konnectivity/agent.grpc.pb.h"
#include "proxy-agent/agent_stats.h"
#include "proxy-agent/connection_table.h"
#include "proxy-agent/endpoint_connection.h"

namespace konn::agent {

// What one connection attempt sends and needs.
struct StreamConfig {
  std::string target;  // host:port of the proxy-server
  std::string agent_id;
  std::string agent_identifiers;  // sent always, maybe empty
  std::string token;              // raw file contents; empty: no authorization header
  EndpointSettings endpoint;      // flow_control is decided per stream from the headers
  // --max-endpoint-connections (0: no limit), over every stream (AgentStats::endpoint_slots).
  int64_t max_endpoint_connections = 0;
  // Node to control plane: announce konn-node-to-control-plane (the agent has
  // --node-to-control-plane-listen addresses). Its tunnels count in `node_stats`.
  bool node_to_control_plane = false;
  EndpointSettings node_endpoint;
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
  std::string error;          // why not ok
};

// The agent's end of one AgentService/Connect stream to one proxy-server (an upstream "client"
// of the ClientSet). It sends agentid/agentidentifiers/authorization and konn-flow-control in
// the request headers, waits for serverid/servercount, then serves DIAL_REQ, DATA, CLOSE_REQ,
// DIAL_CLS and KONN_WINDOW_UPDATE, each by posting to the endpoint connection's io_context: a
// reaction never touches a socket and never waits on one connection (no head-of-line blocking).
//
// Exception to STYLE's "gRPC callback reactors for the gRPC streams": this stream runs on gRPC's
// completion-queue API, its reactions on the agent's one CompletionDriver thread, because the
// callback API's thread hand-offs were most of the agent's context switches per round trip and
// per dial (docs/performance.md). The reactions keep the callback API's names and contract: at
// most one read and one write outstanding (PacketStream), and OnDone once the call's status is
// known, every operation completed and the finish operation was issued.
//
// Lifetime: create() returns a shared_ptr; the reactor also holds itself until OnDone. Owners
// (ServerSet) keep shared_ptrs.
class ServerStreamReactor : public core::tunnel::AsyncPacketStream<ServerStreamReactor> {
 public:
  // Runs on the driver thread once the headers were checked. Returns true to keep the stream
  // (reads start), false to drop it (e.g. a duplicate server id).
  using HandshakeCallback =
      std::function<bool(const std::shared_ptr<ServerStreamReactor>&, const Handshake&)>;
  // Runs once, as the last act of OnDone: the call is over and no callback of it will run
  // again. `handshake_failed` is true when the stream was never kept (bad headers, a failed
  // call, or dropped by HandshakeCallback); `why` says what happened. It receives the reactor's
  // own reference; it runs on the driver's thread, or on the thread whose call issued the finish
  // operation last.
  using EndCallback = std::function<void(std::shared_ptr<ServerStreamReactor> self,
                                         bool handshake_failed, const std::string& why)>;

  static std::shared_ptr<ServerStreamReactor> create(
      std::shared_ptr<grpc::Channel> channel, core::tunnel::CompletionDriver& driver,
      StreamConfig config, core::io::WorkerPool& pool, std::shared_ptr<AgentStats> stats,
      HandshakeCallback on_handshake, EndCallback on_end);
  ~ServerStreamReactor() override;

  // Starts the call. Once.
  void start();
  // Sends DRAIN: the server stops routing new dials here; existing tunnels continue.
  void drain();
  // The gRPC channel's state (probe): not READY for long means the server is unreachable.
  grpc_connectivity_state channel_state() const;
  // Endpoint connections of this stream (dialing or established).
  size_t connection_count() const { return table_->size(); }
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
  // Cancels the call when its read side ended more than `grace` ago and the server has still not
  // ended it (OnDone has not come), e.g. after a packet we could not parse, from a server that
  // ignores our half-close. Without this the stream would stay in the server set for ever and the
  // agent would never reconnect. (A failed write cancels the call at once: on_write_failed.)
  // Returns true when it cancelled, once.
  bool cancel_if_end_overdue(std::chrono::steady_clock::duration grace);

  // Public only for make_shared; use create().
  ServerStreamReactor(std::shared_ptr<grpc::Channel> channel,
                      core::tunnel::CompletionDriver& driver, StreamConfig config,
                      core::io::WorkerPool& pool, std::shared_ptr<AgentStats> stats,
                      HandshakeCallback on_handshake, EndCallback on_end);

 protected:
  // PacketStream.
  void start_write_op(const Packet* p, grpc::WriteOptions opts) override;
  void start_read_op(Packet* p) override;
  void start_finish_op(const grpc::Status& status) override;
  void cancel_op(const grpc::Status& status) override;
  void on_packet(Packet&& p) override;
  void on_read_end() override;
  void on_queued(const Packet& p) override;
  void on_write_failed(const Packet& p) override;

 private:
  friend class core::tunnel::AsyncPacketStream<ServerStreamReactor>;
  // Completions, on the driver's thread. Each runs its reaction, then settle() (reads, writes,
  // the half-close and the finish complete in AsyncPacketStream).
  void on_call_started(bool ok);
  void on_initial_metadata(bool ok);
  void call_over() { OnDone(final_status_); }
  // The reactions, named as in the callback API.
  void OnReadInitialMetadataDone(bool ok);
  void OnDone(const grpc::Status& status);
  // A write or the half-close, held back while StartCall is in flight (at most one: PacketStream
  // has one write or its finish outstanding at a time).
  struct Deferred {
    enum Kind { None, Write, WritesDone } kind = None;
    void* tag = nullptr;  // counted when the operation was asked for
    const Packet* packet = nullptr;
    grpc::WriteOptions opts;
  };
  // Holds `d` back and returns true while the call is still starting.
  bool defer_until_started(Deferred d);

  std::shared_ptr<ServerStreamReactor> self_ptr();
  void handle_dial(const DialRequest& req);
  // A KONN_NODE_* packet, already turned into its forward twin.
  void handle_node_packet(Packet&& p);
  // Tears down every endpoint connection, once.
  void end(const std::string& why);
  std::string log_prefix() const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<AgentService::Stub> stub_;
  core::tunnel::CompletionDriver& driver_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<Packet, Packet>> call_;
  grpc::Status final_status_;  // set by the Finish operation
  std::mutex start_mu_;        // guards the two below
  bool call_started_ = false;
  Deferred deferred_;
  using Self = ServerStreamReactor;
  core::tunnel::MemberTag<Self, &Self::on_call_started> started_tag_{this};
  core::tunnel::MemberTag<Self, &Self::on_initial_metadata> metadata_tag_{this};
  const StreamConfig config_;
  core::io::WorkerPool& pool_;
  std::shared_ptr<AgentStats> stats_;
  std::shared_ptr<ConnectionTable> table_ = std::make_shared<ConnectionTable>();
  // Node-to-control-plane tunnels: by our dial id, then by the server's connectID.
  std::shared_ptr<ConnectionTable> node_table_ = std::make_shared<ConnectionTable>();
  HandshakeCallback on_handshake_;
  EndCallback on_end_;

  // Lock: mu_ guards the fields below; never held while calling into gRPC or PacketStream.
  mutable std::mutex mu_;
  std::shared_ptr<ServerStreamReactor> self_;  // until OnDone
  std::string server_id_;
  bool flow_control_ = false;
  bool node_confirmed_ = false;
  bool accepted_ = false;
  bool ended_ = false;
  std::string handshake_error_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point read_ended_at_;  // zero until on_read_end
  bool overdue_cancelled_ = false;

  // Stream errors (stream_errors_total), reported from OnDone once the status is known.
  std::atomic<bool> cancelled_by_us_{false};  // our own close(abort): not a stream error
  std::atomic<int> failed_write_type_{-1};    // the packet type of a failed write, if any
};

}  // namespace konn::agent
