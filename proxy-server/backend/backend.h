#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <asio/steady_timer.hpp>
#include <spdlog/logger.h>

#include "core/endpoint/connection_table.h"
#include "core/h2/listener.h"
#include "core/tls/certificate_names.h"
#include "core/tunnel/agent_identifiers.h"
#include "core/tunnel/h2_server_stream.h"
#include "konnectivity/agent.pb.h"
#include "proxy-server/backend/proxy_strategy.h"
#include "proxy-server/tunnel/connection_table.h"

namespace konn::server {

class ClientBacklog;
class Router;

// One agent's `AgentService/Connect` stream: the backend that carries many tunnels. With konn's
// flow control its read loop is never paused for one tunnel's sake (no head-of-line blocking):
// each tunnel's DATA is bounded by its credit. An agent without it (upstream's) sends what its
// destinations give as fast as they give it, so its stream stops being read while too much of
// its DATA waits for slow clients (client_backlog); HTTP/2 flow control then stops the agent. See
// docs/ARCHITECTURE.md for the packet flow.
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

  // For the status page; any thread. When the stream was served, the DATA bytes each way, the
  // established tunnels, and the last dial error the agent answered (empty: none).
  std::chrono::system_clock::time_point connected_at() const { return connected_at_; }
  uint64_t bytes_from_agent() const { return bytes_from_agent_.load(std::memory_order_relaxed); }
  uint64_t bytes_to_agent() const { return bytes_to_agent_.load(std::memory_order_relaxed); }
  std::vector<std::pair<int64_t, std::shared_ptr<Frontend>>> tunnels() const {
    return connections_.entries();
  }
  std::string last_error() const;
  void set_last_error(std::string error);

  // A frontend gives up its tunnel: stop routing the agent's packets for it.
  void forget_connection(int64_t connect_id) { connections_.take(connect_id); }
  size_t connection_count() const { return connections_.size(); }
  // Dials routed to this stream and awaiting DIAL_RSP: counted by the PendingDialTable while
  // their entries exist (Router::add_pending passes it). Shared: an entry may outlive the stream.
  const std::shared_ptr<std::atomic<size_t>>& pending_dials() const { return pending_dials_; }
  // The work this stream carries now (agent_load: open tunnels, pending dials, DATA queued
  // towards the agent), for --agent-choice=least-loaded. Any thread, lock-free: three relaxed
  // reads of counters kept where the tunnels, dials and queue change.
  uint64_t load() const {
    return agent_load(connections_.size(), pending_dials_->load(std::memory_order_relaxed),
                      queued_bytes());
  }

  // Agents without konn flow control: `delta` bytes of this agent's DATA joined (+) or left (-)
  // the queues towards clients (ClientBacklog). Past the high mark in all (4 MiB, or half a
  // tunnel's --xfr-channel-size cap when that is less), this stream is not read until the bytes
  // fall to half the mark; while it waits, a tunnel whose client takes nothing for
  // --stalled-client-timeout is closed, and the others move again. Any thread.
  void client_backlog(int64_t delta);
  int64_t client_backlog_bytes() const { return client_backlog_.load(); }
  // The tunnels whose clients client_backlog counts (ClientBacklog::bind), looked at for a
  // stalled client while the stream waits; kept until release, even after the agent closed the
  // tunnel and its last bytes still wait for the client. `backlog` lives in `frontend`: it is
  // read only while the frontend is held. Any thread.
  void watch_client(const ClientBacklog* backlog, std::weak_ptr<Frontend> frontend);
  void unwatch_client(const ClientBacklog* backlog);
  static constexpr int64_t kClientBacklogHigh = 4 * 1024 * 1024;

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
  // Pauses or resumes reading for client_backlog_ (home thread); loops until the decision holds
  // for the count it last read, so a change from another thread is never lost.
  void update_client_gate();
  // While paused for clients: closes the tunnels whose client took nothing for
  // --stalled-client-timeout, then looks again a little later (home thread).
  void arm_stall_check();
  void check_stalled_clients();

  Router& router_;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<Backend> self_;
  std::string agent_id_;
  std::string peer_;
  size_t home_index_ = 0;
  // The request's metadata and the client's certificate names: read until admit(), then freed.
  core::h2::Metadata metadata_;
  std::optional<core::tls::CertificateNames> certificate_;
  std::string identifiers_header_;
  core::tunnel::AgentIdentifiers identifiers_;
  bool flow_control_ = false;
  bool half_close_ = false;
  std::atomic<bool> draining_{false};
  std::atomic<bool> registered_{false};
  ConnectionTable connections_;
  std::shared_ptr<std::atomic<size_t>> pending_dials_ = std::make_shared<std::atomic<size_t>>(0);
  // Node-to-control-plane tunnels of this stream; set in admit() when confirmed, then fixed.
  std::shared_ptr<core::endpoint::ConnectionTable> node_table_;
  asio::io_context* home_ctx_ = nullptr;
  std::atomic<int64_t> client_backlog_{0};
  int64_t backlog_high_ = kClientBacklogHigh;  // set in serve(), then fixed
  int64_t backlog_low_ = kClientBacklogHigh / 2;
  std::atomic<bool> paused_for_clients_{false};  // written on the home thread only
  std::unique_ptr<asio::steady_timer> stall_timer_;  // home thread
  std::mutex watched_mu_;
  std::unordered_map<const ClientBacklog*, std::weak_ptr<Frontend>> watched_;
  bool over_ = false;  // OnDone ran (home thread)
  std::chrono::system_clock::time_point connected_at_;  // set in serve(), then fixed
  std::atomic<uint64_t> bytes_from_agent_{0};
  std::atomic<uint64_t> bytes_to_agent_{0};
  mutable std::mutex last_error_mu_;
  std::string last_error_;  // under last_error_mu_
};

}  // namespace konn::server
