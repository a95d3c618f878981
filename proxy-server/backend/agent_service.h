#pragma once

#include <chrono>

#include "core/tunnel/completion_driver.h"
#include "konnectivity/agent.grpc.pb.h"
#include "proxy-server/backend/backend.h"

namespace konn::server {

class Router;

// AgentService (`/AgentService/Connect`) on gRPC's completion-queue API: each call becomes a
// Backend, whose reactions run on the driver's thread (see Backend for why not the callback API).
class AgentServiceImpl : public AgentService::AsyncService {
 public:
  explicit AgentServiceImpl(Router& router) : router_(router) {}
  // Starts accepting calls on `driver` (built on the agent server's queue). Once, after the
  // server started; the server must be shut down before the driver is destroyed.
  // `shared_listener`: the server also serves the frontend's unix socket (see Backend::accept).
  void accept(core::tunnel::CompletionDriver& driver, bool shared_listener);
  // After the server's Shutdown (which failed the pending request and cancelled every call):
  // waits until each Backend has finished, so the queue can be shut down. False when `timeout`
  // passed first.
  bool wait_calls_done(std::chrono::milliseconds timeout) { return live_.wait_none(timeout); }

 private:
  Router& router_;
  LiveCalls live_;
};

}  // namespace konn::server
