#include "proxy-server/frontend/proxy_service.h"

#include "proxy-server/frontend/grpc_frontend_reactor.h"

namespace konn::server {

grpc::ServerBidiReactor<Packet, Packet>* ProxyServiceImpl::Proxy(
    grpc::CallbackServerContext* ctx) {
  return GrpcFrontend::start(ctx, router_);
}

}  // namespace konn::server
