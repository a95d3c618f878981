#pragma once

#include <chrono>

#include "core/tunnel/async_packet_stream.h"
#include "core/tunnel/completion_driver.h"
#include "konnectivity/client.grpc.pb.h"

namespace konn::server {

class Router;

// ProxyService (`/ProxyService/Proxy`) on gRPC's completion-queue API: each call becomes a
// GrpcFrontend (see there for why not the callback API).
class ProxyServiceImpl : public ProxyService::AsyncService {
 public:
  explicit ProxyServiceImpl(Router& router) : router_(router) {}
  // Starts accepting calls: their arrival on `notify` (built on the frontend server's queue),
  // their operations on `calls` (the agent streams' queue). Once, after both servers started;
  // the frontend server must be shut down before either driver is destroyed.
  // `shared_listener`: one server serves both services (see GrpcFrontend::accept).
  void accept(core::tunnel::CompletionDriver& notify, grpc::CompletionQueue* calls,
              bool shared_listener);
  // After the server's Shutdown: waits until each GrpcFrontend has finished, so both queues can
  // be shut down. False when `timeout` passed first.
  bool wait_calls_done(std::chrono::milliseconds timeout) { return live_.wait_none(timeout); }

 private:
  Router& router_;
  core::tunnel::LiveCalls live_;
};

}  // namespace konn::server
