#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "core/io/asio_compat.h"
#include "core/io/worker_pool.h"
#include "proxy-agent/agent_options.h"
#include "proxy-agent/agent_stats.h"
#include "proxy-agent/server_stream_reactor.h"

namespace konn::agent {

// The agent's streams to the proxy-servers (upstream's ClientSet): one stream per distinct
// server id. A connect loop on `ctx` dials (a new gRPC channel, so a new TCP connection an L4
// balancer may send elsewhere) every sync interval until as many distinct servers are connected
// as the last servercount said, or forever with --sync-forever; a stream to an already connected
// server is dropped. Failures back off (1.5x, jitter 0.1, from sync-interval up to
// sync-interval-cap); a success resets the backoff. A probe loop drops streams whose channel is
// no longer usable. Ended streams are removed and the loop replaces them.
//
// The wanted count follows upstream's ServerCount(): with --count-server-leases and
// --server-count-source=default the lease count, with =max the larger of it and the servercount,
// otherwise the servercount; never below 1. Until a first lease list succeeded, the servercount.
//
// Lock: mu_ guards streams_, server_count_, lease_count_, draining_/stopping_ and live_; taken from
// a stream's home worker (handshake, stream end) and from the loops; never held while calling a
// reactor.
class ServerSet : public std::enable_shared_from_this<ServerSet> {
 public:
  // `node_stats` counts the node-to-control-plane connections (with
  // --node-to-control-plane-listen; may be null otherwise).
  ServerSet(const AgentOptions& options, core::io::WorkerPool& pool, asio::io_context& ctx,
            std::shared_ptr<AgentStats> stats, std::shared_ptr<AgentStats> node_stats = nullptr);
  ~ServerSet();
  ServerSet(const ServerSet&) = delete;
  ServerSet& operator=(const ServerSet&) = delete;

  // Spawns the connect and probe loops on ctx. Once.
  void start();
  // First shutdown signal: no new server connections, DRAIN on every stream (and on a stream
  // whose attempt was under way, once its handshake is done; it is kept). Existing tunnels
  // keep working and new dials are still served.
  void drain();
  // Ends every stream (gracefully, or cancelled with `abort`) and stops the loops. Waits up to
  // `wait` for the streams' OnDone so no stream callback runs after it returns. Returns true when
  // they all finished.
  bool stop(bool abort, std::chrono::milliseconds wait);

  // Distinct servers connected now.
  size_t connected() const;
  std::vector<std::string> server_ids() const;
  // Endpoint connections over all streams.
  size_t endpoint_connections() const;
  // How many distinct servers the agent wants: the servercount the servers last announced (1
  // until one answers), or the lease count per --server-count-source once one is known.
  int64_t server_count() const;
  // A new count of valid server leases (--count-server-leases; any thread).
  void set_lease_count(int64_t count);
  // The stream for a new node-to-control-plane connection: of the servers that confirmed the
  // extension, the one carrying the fewest such connections; null when none did.
  std::shared_ptr<ServerStreamReactor> pick_node_stream() const;
  // Closes every node-to-control-plane connection (each server is told), e.g. on drain.
  void close_node_connections(const std::string& why);
  // Servers connected now that confirmed node to control plane.
  size_t node_ready_servers() const;

  // The status page's view (any thread; mu_ is held only to copy): every server connected now or
  // seen before (by server id), and failed connection attempts (by target, server id empty).
  struct ServerRow {
    std::string server_id;
    std::string target;
    bool connected = false;
    std::chrono::system_clock::time_point since;  // connected: since when
    size_t tunnels = 0;
    size_t node_tunnels = 0;
    bool flow_control = false;
    std::string last_error;
    std::chrono::system_clock::time_point last_error_at;
  };
  struct Event {
    std::chrono::system_clock::time_point at;
    std::string target;
    std::string server_id;
    std::string what;
  };
  struct TunnelRow {
    std::string server_id;
    core::endpoint::EndpointConnection::Status status;
  };
  struct Status {
    std::vector<ServerRow> servers;
    std::vector<TunnelRow> tunnels;  // every endpoint connection of the connected servers
    std::vector<Event> recent;  // newest last, at most kEventsKept
    bool draining = false;
    int64_t server_count = 1;
  };
  static constexpr size_t kEventsKept = 32;
  Status status() const;

 private:
  enum class Outcome { Connected, Duplicate, Failed };
  struct Attempt;

  core::io::Awaitable<void> connect_loop();
  core::io::Awaitable<void> probe_loop();
  core::io::Awaitable<Outcome> connect_once();
  // Builds the next attempt's config (host round-robin, token, TLS, egress proxy); false on
  // failure (logged).
  bool prepare_attempt(StreamConfig* config);
  bool want_more() const;
  // Records a connection event and, when `error` is set, the last error of `key`; mu_ held.
  void note_locked(const std::string& key, const std::string& target, const std::string& server_id,
                   const std::string& what, bool error);
  // The wanted server count (server_count()); mu_ held.
  int64_t target_count_locked() const;
  // Called from the reactor's reactions (a stream's home worker).
  bool on_handshake(const std::shared_ptr<ServerStreamReactor>& s, const Handshake& h,
                    const std::weak_ptr<Attempt>& attempt);
  // Completes an attempt on ctx (any thread).
  void finish_attempt(const std::weak_ptr<Attempt>& attempt, Outcome outcome,
                      const std::string& why);
  void on_end(std::shared_ptr<ServerStreamReactor> s, bool handshake_failed, const std::string& why,
              const std::weak_ptr<Attempt>& attempt);

  const AgentOptions& options_;
  core::io::WorkerPool& pool_;
  asio::io_context& ctx_;
  std::shared_ptr<AgentStats> stats_;
  std::shared_ptr<AgentStats> node_stats_;
  std::shared_ptr<const core::net::DestinationPolicy> destinations_;  // --allowed-destinations
  const EgressProxyConfig egress_;  // --proxy-url, else HTTPS_PROXY / NO_PROXY
  size_t next_host_ = 0;            // connect loop only

  mutable std::mutex mu_;
  std::condition_variable all_done_;
  std::map<std::string, std::shared_ptr<ServerStreamReactor>> streams_;  // by server id
  int live_ = 0;                        // reactors created whose OnDone has not run yet
  int64_t server_count_ = 1;            // last servercount header of a new server
  std::optional<int64_t> lease_count_;  // last lease count, once one was listed
  bool draining_ = false;
  bool stopping_ = false;
  // For status(): since when each server id is connected, the last error of each server id or
  // target, and the last events.
  std::map<std::string, std::chrono::system_clock::time_point> since_;
  struct LastError {
    std::string target;
    std::string server_id;
    std::string error;
    std::chrono::system_clock::time_point at;
  };
  std::map<std::string, LastError> last_errors_;
  std::deque<Event> events_;
  // Servers that did not confirm node to control plane, each logged once.
  std::set<std::string> node_refused_;
  mutable std::atomic<size_t> node_turn_{0};         // pick_node_stream's tie-break
  std::shared_ptr<ServerStreamReactor> pending_;     // the attempt waiting for headers
  std::shared_ptr<asio::steady_timer> loop_timer_;   // the connect loop's wait (ctx only)
  std::shared_ptr<asio::steady_timer> probe_timer_;  // the probe loop's wait (ctx only)
};

}  // namespace konn::agent
