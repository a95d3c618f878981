#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/tunnel/tunnel_life.h"
#include "konnectivity/client.pb.h"
#include "proxy-server/server_options.h"

namespace konn::server {

// Shared by every frontend kind. A frontend stops reading its client while this much of the
// client's data waits in the agent stream's queue, and resumes below the low mark.
inline constexpr int64_t kToAgentHigh = 4 * 1024 * 1024;
inline constexpr int64_t kToAgentLow = kToAgentHigh / 2;
// A tunnel whose CLOSE_REQ the agent does not answer is dropped after this long.
inline constexpr std::chrono::seconds kCloseWait(10);

// The policy of one frontend tunnel, gRPC or CONNECT (core::tunnel::TunnelLife): the watermark
// above, konn's credit with an agent that announced flow control and the queue cap
// (--xfr-channel-size) without it, and the server's quiet limits. `half_close`: the tunnel passes
// half-closes (the client asked for it and the agent supports it).
inline core::tunnel::TunnelPolicy frontend_tunnel_policy(const ServerOptions& options,
                                                         bool flow_control, bool half_close) {
  core::tunnel::TunnelPolicy policy;
  policy.to_peer_high = kToAgentHigh;
  policy.to_peer_low = kToAgentLow;
  policy.flow_control = flow_control;
  policy.queue_cap = flow_control ? 0 : options.tunnel_queue_cap_bytes();
  policy.half_close = half_close;
  policy.idle_timeout = options.tunnel_idle_timeout;
  policy.half_close_timeout = options.half_close_timeout;
  return policy;
}

// What the status page shows of one established tunnel (Frontend::status).
struct TunnelStatus {
  const char* kind = "";                          // "grpc" or "http-connect"
  std::string destination;                        // the DIAL_REQ's address
  std::chrono::steady_clock::time_point started;  // the frontend stream or connection began
  uint64_t bytes_from_client = 0;
  uint64_t bytes_to_client = 0;
  bool half_closed = false;  // one side finished sending
};

// One tunnel as the backend (agent stream) sees it: the kube-apiserver side of a dial, implemented
// by the gRPC frontend (GrpcFrontend) and the HTTP CONNECT frontend (ConnectSession). Every method
// but status() and log_prefix() is called on the agent connection's worker (the Backend's home
// thread: its read loop or its stall check), must not block, and must cope with the frontend having
// already closed (it then just drops what it is given).
class Frontend {
 public:
  virtual ~Frontend() = default;

  // The agent answered our DIAL_REQ. Returns false when the frontend no longer wants the
  // connection (it went away or cancelled); the backend then closes it at the agent.
  virtual bool deliver_dial_response(Packet&& p) = 0;
  // DATA from the agent for this tunnel.
  virtual void deliver_data(Packet&& p) = 0;
  // The agent closed the connection (CLOSE_RSP) or abandoned the dial (DIAL_CLS).
  virtual void deliver_close(Packet&& p) = 0;
  // The agent returned send credit (konn flow control only).
  virtual void deliver_window_update(int64_t bytes) = 0;
  // KONN_CLOSE_WRITE: the agent's endpoint finished sending (only on tunnels dialled with
  // konnHalfClose); the agent still reads.
  virtual void deliver_close_write(Packet&& p) = 0;
  // The agent stream ended while this tunnel was pending or established.
  virtual void backend_gone() = 0;

  // Agents without konn flow control (Backend::client_backlog, which finds a stalled client
  // through the tunnel's ClientBacklog and logs it): closes the tunnel because its client took
  // nothing for `bound` while the agent's stream waited for it: RESOURCE_EXHAUSTED to a gRPC
  // client, a closed socket to a CONNECT client.
  virtual void close_stalled(std::chrono::steady_clock::duration bound) = 0;

  // For the status page (the admin thread): reads atomics, or takes the frontend's own lock
  // briefly; never waits for the data path. Any thread.
  virtual TunnelStatus status() const = 0;

  // "[C<connectID> D<dialID> A<agentID>] " for log lines.
  virtual std::string log_prefix() const = 0;
};

}  // namespace konn::server
