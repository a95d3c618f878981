#pragma once

#include "konnectivity/agent.grpc.pb.h"

namespace konn::server {

class Router;

// AgentService (`/AgentService/Connect`): each call becomes a Backend reactor.
class AgentServiceImpl : public AgentService::CallbackService {
 public:
  explicit AgentServiceImpl(Router& router) : router_(router) {}
  grpc::ServerBidiReactor<Packet, Packet>* Connect(grpc::CallbackServerContext* ctx) override;

 private:
  Router& router_;
};

}  // namespace konn::server
