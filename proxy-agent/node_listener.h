#pragma once

#include <memory>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include "core/io/asio_compat.h"
#include "core/io/worker_pool.h"
#include "proxy-agent/agent_options.h"
#include "proxy-agent/agent_stats.h"
#include "proxy-agent/server_set.h"

namespace konn::agent {

// Node to control plane (KEP-2025): the --node-to-control-plane-listen acceptors. Each accepted
// connection (TCP_NODELAY) is placed on a worker and tunnelled over the stream of the
// least-loaded server that confirmed the extension (ServerSet::pick_node_stream); the bytes,
// TLS included, pass through untouched. With no such server, or past
// --max-node-to-control-plane-connections, the connection is closed at once, logged (about one
// line a second) and counted.
//
// The acceptors live on `ctx` (the agent's control context); start() and stop() are called
// from any thread, stop() closes them on ctx.
class NodeListener : public std::enable_shared_from_this<NodeListener> {
 public:
  NodeListener(const AgentOptions& options, asio::io_context& ctx, core::io::WorkerPool& pool,
               std::shared_ptr<ServerSet> servers, std::shared_ptr<AgentStats> stats);

  // Binds every address (throws std::system_error naming it when one cannot be bound) and
  // starts accepting.
  void start();
  // Stops accepting (drain, shutdown): new node-side connections are refused by the kernel;
  // open ones go on until they end or their stream does.
  void stop();
  // The bound ports, in flag order (tests listen on port 0).
  std::vector<uint16_t> ports() const { return ports_; }

 private:
  struct Listener {
    asio::ip::tcp::acceptor acceptor;
    std::string destination;
    std::string address;  // as given, for logs
  };
  core::io::Awaitable<void> accept_loop(std::shared_ptr<Listener> l);
  void refuse(asio::ip::tcp::socket& s, const std::string& why, size_t limit_slot);

  const AgentOptions& options_;
  asio::io_context& ctx_;
  core::io::WorkerPool& pool_;
  std::shared_ptr<ServerSet> servers_;
  std::shared_ptr<AgentStats> stats_;
  std::vector<std::shared_ptr<Listener>> listeners_;  // ctx only after start()
  std::vector<uint16_t> ports_;
};

}  // namespace konn::agent
