#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include <spdlog/logger.h>

#include "core/h2/listener.h"
#include "core/tunnel/deadlines.h"
#include "core/tunnel/h2_server_stream.h"
#include "core/tunnel/tunnel_life.h"
#include "konnectivity/client.pb.h"
#include "proxy-server/tunnel/client_backlog.h"
#include "proxy-server/tunnel/frontend.h"

namespace konn::server {

class Backend;
class Router;

// One `ProxyService/Proxy` stream from kube-apiserver (or any konnectivity client): exactly one
// tunnel. It dials through a backend chosen by the Router, then relays DATA both ways.
//
// Flow control, per direction (docs/ARCHITECTURE.md, "Backpressure"):
//  - client -> agent: reading this stream pauses while this tunnel's bytes in the backend's
//    queue pass kToAgentHigh, or (konn flow control) while the agent's credit is used up;
//  - agent -> client: with konn flow control the agent never has more than a window in flight
//    and we return credit as the client takes bytes; without it (upstream agents), the bytes
//    waiting for the client count towards the agent's backlog (Backend::client_backlog), which
//    stops reading the agent's stream while too much waits; a client that takes nothing for
//    --stalled-client-timeout meanwhile, or whose own queue passes the cap, is closed alone.
//
// Exception to STYLE's "gRPC callback reactors for the gRPC streams", as for Backend: the call
// runs on core/h2 (H2ServerStream), on the worker thread that owns the client's connection. The
// frontend listener places a new connection on the worker of the agent connection its dial will
// most likely use, so that a packet goes from the client's stream to the agent's and back without
// changing threads (docs/performance.md). The reactions keep the callback API's contract
// (PacketStream's rules; OnDone once the call is over), and may run on the home worker, another
// worker (a backend elsewhere) or the timer thread: everything below is thread-safe as it was for
// callbacks.
//
// Lifetime: as Backend (shared_ptr to self until OnDone). `mu_` guards the tunnel state; it is
// never held while calling send()/close() or into the backend.
//
// The tunnel's policy (state, watermark towards the agent, credit both ways, queue cap, quiet
// timer, half-close, close summary) is its TunnelLife, used under `mu_`; this class keeps the
// stream's I/O and the server's metrics.
class GrpcFrontend : public core::tunnel::H2ServerStream, public Frontend {
 public:
  // Serves one Proxy call (from the frontend listener's CallHandler, on the connection's thread,
  // `home`): takes a --max-frontend-streams slot and starts reading.
  static void serve(asio::io_context& home, const std::shared_ptr<core::h2::Stream>& stream,
                    const core::h2::PeerInfo& peer, Router& router);
  ~GrpcFrontend() override;

  // Frontend (called from the backend's read loop).
  bool deliver_dial_response(Packet&& p) override;
  void deliver_data(Packet&& p) override;
  void deliver_close(Packet&& p) override;
  void deliver_window_update(int64_t bytes) override;
  void deliver_close_write(Packet&& p) override;
  void backend_gone() override;
  void close_stalled(std::chrono::steady_clock::duration bound) override;
  TunnelStatus status() const override;
  std::string log_prefix() const override;

 private:
  // Idle (no DIAL_REQ yet) -> Dialing (DIAL_REQ sent to an agent, waiting for DIAL_RSP) ->
  // Established (connectID known; DATA flows) -> Closing (CLOSE_REQ sent to the agent, waiting
  // for CLOSE_RSP) -> Closed (done; packets are dropped).
  using State = core::tunnel::TunnelLife::State;
  using Side = core::tunnel::TunnelLife::Side;

  // Bytes this tunnel put into the backend's queue have been written: maybe resume reading.
  struct ToAgentListener : core::tunnel::WriteListener {
    GrpcFrontend* owner = nullptr;
    void on_written(size_t bytes) override { owner->on_sent_to_agent(bytes); }
  };
  // Bytes from the agent have been written to the client: maybe return credit.
  struct ToClientListener : core::tunnel::WriteListener {
    GrpcFrontend* owner = nullptr;
    void on_written(size_t bytes) override { owner->on_sent_to_client(bytes); }
  };

  explicit GrpcFrontend(Router& router);

  void call_over() override { OnDone(); }
  // The call arrived: take a --max-frontend-streams slot, start reading.
  void begin();
  void OnDone();

  void on_packet(Packet&& p) override;
  void on_read_end() override;
  void on_queued(const Packet& p) override;

  void on_dial_request(Packet&& p);
  void on_client_data(Packet&& p);
  void on_close_request(const Packet& p);
  void on_client_close_write(const Packet& p);
  void on_dial_close(const Packet& p);
  void fail_dial(int64_t random, const std::string& error);
  // Ends the tunnel because its client does not keep up: the agent is told, the client gets
  // RESOURCE_EXHAUSTED with `reason`, and the tunnel's bytes no longer hold the agent.
  void close_unread(const std::string& reason);
  void on_sent_to_agent(size_t bytes);
  void on_sent_to_client(size_t bytes);
  // Runs `fn` on the timer context after `delay` (router_.deadlines()), unless the tunnel state
  // changed by then; replaces the pending wait.
  void arm_timer(std::chrono::nanoseconds delay, void (GrpcFrontend::*fn)());
  void cancel_timer();  // under mu_ (or in the destructor)
  void on_dial_timeout();
  void on_dial_request_timeout();
  void on_close_timeout();
  // One side finished sending (KONN_CLOSE_WRITE either way): the half-close bound starts and the
  // tunnel counts in half_closed_tunnels. Call with mu_ held.
  void one_side_finished_locked(Side side);
  // The tunnel's one transition (logged by the life). Call with mu_ held.
  void set_state_locked(State s);
  State state_locked() const { return life_.state(); }
  std::string prefix_locked() const;  // log_prefix() with mu_ held
  // --half-close-timeout or --tunnel-idle-timeout passed without traffic: close the tunnel.
  void on_quiet();
  std::shared_ptr<GrpcFrontend> self_ptr();
  void set_reason(const std::string& reason);

  std::string peer_;  // set once the call arrived
  Router& router_;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<GrpcFrontend> self_;
  ToAgentListener to_agent_listener_;
  ToClientListener to_client_listener_;
  bool has_slot_ = false;  // took a --max-frontend-streams slot (set in start, read in OnDone)

  mutable std::mutex mu_;
  // Under mu_, but for its atomic counters (bytes: out = from the client, in = to the client).
  // Its policy is set with the dial.
  core::tunnel::TunnelLife life_;
  int64_t random_ = 0;
  int64_t connect_id_ = 0;
  std::string address_;
  std::shared_ptr<Backend> backend_;
  std::string agent_id_;
  bool half_close_ = false;  // the client asked for konnHalfClose and the agent supports it
  ClientBacklog backlog_;    // without flow control: the agent's bytes waiting for the client
  std::chrono::steady_clock::time_point dial_started_;
  std::chrono::steady_clock::time_point established_at_;
  // The pending wait (DIAL_REQ, DIAL_RSP or CLOSE_RSP) on router_.deadlines(); 0: none.
  core::tunnel::Deadlines::Id timer_ = 0;
};

}  // namespace konn::server
