#pragma once

#include <atomic>
#include <memory>
#include <string>

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>
#include <spdlog/logger.h>

#include "core/tunnel/agent_identifiers.h"
#include "core/tunnel/packet_stream.h"
#include "proxy-server/tunnel/connection_table.h"

namespace konn::server {

class Router;

// One agent's `AgentService/Connect` stream: the backend that carries many tunnels. Its read
// loop is never paused for one tunnel's sake (no head-of-line blocking): packets are handed to
// their frontend, which queues or closes alone. See docs/ARCHITECTURE.md for the packet flow.
//
// Exception to STYLE rule 7's `delete this`: the reactor is owned by a shared_ptr to itself
// (`self_`) released in OnDone, because frontends hold it too and must be able to call send()
// safely after the stream ended.
class Backend : public grpc::ServerBidiReactor<Packet, Packet>, public core::tunnel::PacketStream {
 public:
  // Validates the agent's metadata, answers with serverid/servercount headers, registers the
  // backend, and starts reading. On bad metadata the stream is finished with the reason.
  static Backend* start(grpc::CallbackServerContext* ctx, Router& router);

  const std::string& agent_id() const { return agent_id_; }
  const core::tunnel::AgentIdentifiers& identifiers() const { return identifiers_; }
  bool draining() const { return draining_.load(std::memory_order_relaxed); }
  // Whether the agent announced konn's per-tunnel credit (KONN_WINDOW_UPDATE).
  bool flow_control() const { return flow_control_; }
  // Whether the agent announced konn's half-close (DialRequest.konnHalfClose, KONN_CLOSE_WRITE).
  bool half_close() const { return half_close_; }
  const std::string& peer() const { return peer_; }

  // A frontend gives up its tunnel: stop routing the agent's packets for it.
  void forget_connection(int64_t connect_id) { connections_.take(connect_id); }
  size_t connection_count() const { return connections_.size(); }

  // gRPC reactions.
  void OnSendInitialMetadataDone(bool ok) override;
  void OnReadDone(bool ok) override { handle_read_done(ok); }
  void OnWriteDone(bool ok) override { handle_write_done(ok); }
  void OnDone() override;
  void OnCancel() override {}

 private:
  Backend(grpc::CallbackServerContext* ctx, Router& router);
  void begin();
  // Accepted (token reviewed, if required): answer headers, register, start reading.
  void admit();
  // --verify-agent-identifiers=cert: whether the client certificate proves every identifier;
  // if not, the stream is finished with PERMISSION_DENIED (logged, counted).
  bool identifiers_proven();

  void start_write_op(const Packet* p, grpc::WriteOptions opts) override { StartWrite(p, opts); }
  void start_read_op(Packet* p) override { StartRead(p); }
  void start_finish_op(const grpc::Status& s) override { Finish(s); }
  void cancel_op(const grpc::Status& status) override {
    cancelled_by_us_ = true;
    core::tunnel::cancel_server_call(*ctx_, status);
  }
  void on_packet(Packet&& p) override;
  void on_read_end() override;
  void on_queued(const Packet& p) override;
  void on_write_failed(const Packet& p) override;

  void on_dial_response(Packet&& p);

  grpc::CallbackServerContext* ctx_;
  Router& router_;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<Backend> self_;
  std::string agent_id_;
  std::string peer_;
  std::string identifiers_header_;
  core::tunnel::AgentIdentifiers identifiers_;
  bool flow_control_ = false;
  bool half_close_ = false;
  std::atomic<bool> draining_{false};
  std::atomic<bool> registered_{false};
  std::atomic<bool> cancelled_by_us_{false};  // our own abort: not a stream error
  bool read_error_counted_ = false;           // on_read_end only (reads are serialized)
  ConnectionTable connections_;
};

}  // namespace konn::server
