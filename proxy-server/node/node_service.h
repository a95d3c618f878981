#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/endpoint/connection_table.h"
#include "core/endpoint/endpoint_connection.h"
#include "core/endpoint/endpoint_stats.h"
#include "core/io/worker_pool.h"
#include "core/metrics/metrics.h"
#include "core/tunnel/packet_stream.h"
#include "proxy-server/server_options.h"

namespace konn::server {

// Node to control plane (KEP-2025), the server's half: with --node-to-control-plane-destinations
// set, an agent that announced `konn-node-to-control-plane` may send KONN_NODE_DIAL_REQ on its
// stream, and the server dials the destination for it, as an agent dials for a frontend. Each
// such tunnel is an EndpointConnection (the agent's own class, in node direction): the same
// per-tunnel credit, half-close, bounded queues and close rules as the forward direction. Its
// sockets live on a WorkerPool of their own.
//
// A dial is refused (KONN_NODE_DIAL_RSP with an error, logged with the agent's identity and
// counted) when its address is not exactly one of the destinations, or past
// --max-node-to-control-plane-connections. Thread-safe: handle() runs on the agent stream's
// reaction thread; the connections on the pool.
class NodeService {
 public:
  NodeService(const ServerOptions& options, core::metrics::Registry& registry);
  ~NodeService();
  NodeService(const NodeService&) = delete;
  NodeService& operator=(const NodeService&) = delete;

  void start();
  void stop();

  // Who sent a packet: for the tunnel's logs and the refusals'.
  struct Agent {
    std::string agent_id;
    std::string peer;
    std::string identifiers;
  };
  // One agent stream's node tunnels.
  using Table = std::shared_ptr<core::endpoint::ConnectionTable>;
  static Table new_table() { return std::make_shared<core::endpoint::ConnectionTable>(); }
  // A KONN_NODE_* packet from the agent, already turned into its forward twin (DIAL_REQ, DATA,
  // CLOSE_RSP for KONN_NODE_CLOSE, DIAL_CLS, KONN_WINDOW_UPDATE, KONN_CLOSE_WRITE).
  void handle(Packet&& p, const std::shared_ptr<core::tunnel::PacketStream>& stream,
              const Table& table, const Agent& agent);
  // The agent stream ended: its tunnels close at once (their sockets are reset).
  static void stream_ended(const Table& table);

  // Copies the counters into the registry (call before serializing it).
  void update_metrics();
  const core::endpoint::EndpointStats& stats() const { return *stats_; }

 private:
  void dial(const DialRequest& req, const std::shared_ptr<core::tunnel::PacketStream>& stream,
            const Table& table, const Agent& agent);

  const ServerOptions& options_;
  std::shared_ptr<core::endpoint::EndpointStats> stats_ =
      std::make_shared<core::endpoint::EndpointStats>();
  core::endpoint::EndpointSettings settings_;
  core::io::WorkerPool pool_;

  struct Link {
    const std::atomic<uint64_t>* source;
    prometheus::Counter* target;
    uint64_t seen = 0;
  };
  std::mutex metrics_mu_;
  std::vector<Link> counters_;
  prometheus::Gauge* open_ = nullptr;
};

}  // namespace konn::server
