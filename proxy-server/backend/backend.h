#pragma once

#include <atomic>
#include <memory>
#include <string>

#include <grpcpp/server_context.h>
#include <spdlog/logger.h>

#include "core/tunnel/agent_identifiers.h"
#include "core/tunnel/async_packet_stream.h"
#include "core/tunnel/completion_driver.h"
#include "konnectivity/agent.grpc.pb.h"
#include "proxy-agent/connection_table.h"
#include "proxy-server/tunnel/connection_table.h"

namespace konn::server {

class Router;
using core::tunnel::LiveCalls;

// One agent's `AgentService/Connect` stream: the backend that carries many tunnels. Its read
// loop is never paused for one tunnel's sake (no head-of-line blocking): packets are handed to
// their frontend, which queues or closes alone. See docs/ARCHITECTURE.md for the packet flow.
//
// Exception to STYLE's "gRPC callback reactors for the gRPC streams": agent streams run on
// gRPC's completion-queue API, their reactions on one CompletionDriver thread, because the
// callback API's thread hand-offs were most of the server's context switches per round trip and
// per dial (docs/performance.md). The reactions keep the callback API's contract: at most one
// read and one write outstanding (PacketStream), OnDone once the call is over, every operation
// completed and the finish operation issued.
//
// Exception to STYLE rule 7's `delete this`: the reactor is owned by a shared_ptr to itself
// (`self_`) released in OnDone, because frontends hold it too and must be able to call send()
// safely after the stream ended.
class Backend : public core::tunnel::AsyncServerStream<Backend> {
 public:
  // Asks for the next agent call on `driver`'s server queue. When one arrives, its Backend asks
  // for the next one and then serves it: it validates the agent's metadata, answers with
  // serverid/servercount headers, registers, and starts reading. On bad metadata the stream is
  // finished with the reason. When the server shuts down, the request ends and nothing more is
  // asked for.
  // `shared_listener`: the server also serves ProxyService on a unix socket; a Connect call
  // that came in through that socket is refused (agents reach the server over TCP only).
  static void accept(AgentService::AsyncService& service, core::tunnel::CompletionDriver& driver,
                     LiveCalls& live, Router& router, bool shared_listener);

  const std::string& agent_id() const { return agent_id_; }
  const core::tunnel::AgentIdentifiers& identifiers() const { return identifiers_; }
  bool draining() const { return draining_.load(std::memory_order_relaxed); }
  // Whether the agent announced konn's per-tunnel credit (KONN_WINDOW_UPDATE).
  bool flow_control() const { return flow_control_; }
  // Whether the agent announced konn's half-close (DialRequest.konnHalfClose, KONN_CLOSE_WRITE).
  bool half_close() const { return half_close_; }
  // Whether node to control plane was confirmed on this stream (KONN_NODE_* accepted).
  bool node_to_control_plane() const { return node_table_ != nullptr; }
  const std::string& peer() const { return peer_; }

  // A frontend gives up its tunnel: stop routing the agent's packets for it.
  void forget_connection(int64_t connect_id) { connections_.take(connect_id); }
  size_t connection_count() const { return connections_.size(); }

  // Public only for make_shared; use accept().
  Backend(AgentService::AsyncService& service, core::tunnel::CompletionDriver& driver,
          LiveCalls& live, Router& router);

 private:
  friend class core::tunnel::AsyncPacketStream<Backend>;
  // Completions, on the driver's thread (reads, writes, the finish and the done notification
  // complete in AsyncPacketStream).
  void on_accepted(bool ok);
  void on_metadata_sent(bool ok);
  void call_over() { OnDone(); }
  // The reactions, named as in the callback API.
  void OnSendInitialMetadataDone(bool ok);
  void OnDone();

  void begin();
  // Accepted (token reviewed, if required): answer headers, register, start reading.
  void admit();
  // --verify-agent-identifiers=cert: whether the client certificate proves every identifier;
  // if not, the stream is finished with PERMISSION_DENIED (logged, counted).
  bool identifiers_proven();

  void on_packet(Packet&& p) override;
  void on_read_end() override;
  void on_queued(const Packet& p) override;

  void on_dial_response(Packet&& p);

  AgentService::AsyncService& service_;
  core::tunnel::CompletionDriver& driver_;
  LiveCalls& live_;
  using Self = Backend;
  core::tunnel::MemberTag<Self, &Self::on_accepted> accepted_tag_{this};
  core::tunnel::MemberTag<Self, &Self::on_metadata_sent> metadata_tag_{this};
  Router& router_;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<Backend> self_;
  std::string agent_id_;
  std::string peer_;
  bool shared_listener_ = false;
  std::string identifiers_header_;
  core::tunnel::AgentIdentifiers identifiers_;
  bool flow_control_ = false;
  bool half_close_ = false;
  std::atomic<bool> draining_{false};
  std::atomic<bool> registered_{false};
  ConnectionTable connections_;
  // Node-to-control-plane tunnels of this stream; set in admit() when confirmed, then fixed.
  std::shared_ptr<agent::ConnectionTable> node_table_;
};

}  // namespace konn::server
