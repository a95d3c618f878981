#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/logger.h>

#include "core/h2/listener.h"
#include "core/tls/certificate_names.h"
#include "core/tunnel/agent_identifiers.h"
#include "core/tunnel/h2_server_stream.h"
#include "konnectivity/agent.pb.h"
#include "proxy-agent/connection_table.h"
#include "proxy-server/tunnel/connection_table.h"

namespace konn::server {

class Router;

// One agent's `AgentService/Connect` stream: the backend that carries many tunnels. Its read
// loop is never paused for one tunnel's sake (no head-of-line blocking): packets are handed to
// their frontend, which queues or closes alone. See docs/ARCHITECTURE.md for the packet flow.
//
// Exception to STYLE's "gRPC callback reactors for the gRPC streams": the call runs on the
// project's own HTTP/2 (core/h2, H2ServerStream), on the worker thread that owns the agent's
// connection, because gRPC C++'s thread hand-offs and wake-ups were most of the server's cost per
// round trip and per dial (docs/performance.md). A frontend placed on the same worker hands its
// packets over inline. The reactions keep the callback API's contract (PacketStream's rules;
// OnDone once the call is over).
//
// Exception to STYLE rule 7's `delete this`: the reactor is owned by a shared_ptr to itself
// (`self_`) released in OnDone, because frontends hold it too and must be able to call send()
// safely after the stream ended.
class Backend : public core::tunnel::H2ServerStream {
 public:
  // Serves one Connect call (from the agent listener's CallHandler, on the connection's thread,
  // `home`): validates the agent's metadata (and its certificate for
  // --verify-agent-identifiers=cert), answers with serverid/servercount headers, registers, and
  // starts reading. On bad metadata the call is finished with the reason.
  // `home_index`: the worker's index in the server's pool (BackendRegistry::likely_home).
  static void serve(asio::io_context& home, size_t home_index,
                    const std::shared_ptr<core::h2::Stream>& stream,
                    const core::h2::CallInfo& call, const core::h2::PeerInfo& peer,
                    Router& router);

  size_t home_index() const { return home_index_; }

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

  // Public only for make_shared; use serve().
  explicit Backend(Router& router);

 private:
  void call_over() override { OnDone(); }
  void OnDone();

  void begin();
  // Accepted (token reviewed, if required): answer headers, register, start reading.
  void admit();
  // --verify-agent-identifiers=cert: whether the client certificate proves every identifier;
  // if not, the stream is finished with PERMISSION_DENIED (logged, counted).
  bool identifiers_proven();
  // The request's values of `key`.
  std::vector<std::string> metadata_values(std::string_view key) const;

  void on_packet(Packet&& p) override;
  void on_read_end() override;
  void on_queued(const Packet& p) override;

  void on_dial_response(Packet&& p);

  Router& router_;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<Backend> self_;
  std::string agent_id_;
  std::string peer_;
  size_t home_index_ = 0;
  core::h2::Metadata metadata_;  // the request's
  std::optional<core::tls::CertificateNames> certificate_;  // the client's, when it sent one
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
