#include "proxy-server/frontend/proxy_service.h"

#include "proxy-server/frontend/grpc_frontend_reactor.h"

namespace konn::server {

void ProxyServiceImpl::accept(core::tunnel::CompletionDriver& notify,
                              grpc::CompletionQueue* calls, bool shared_listener) {
  GrpcFrontend::accept(*this, notify, calls, live_, router_, shared_listener);
}

}  // namespace konn::server
