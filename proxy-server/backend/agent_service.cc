#include "proxy-server/backend/agent_service.h"

#include "proxy-server/backend/backend.h"

namespace konn::server {

grpc::ServerBidiReactor<Packet, Packet>* AgentServiceImpl::Connect(
    grpc::CallbackServerContext* ctx) {
  return Backend::start(ctx, router_);
}

}  // namespace konn::server
