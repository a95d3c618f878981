#include "proxy-server/backend/agent_service.h"

#include "proxy-server/backend/backend.h"

namespace konn::server {

void AgentServiceImpl::accept(core::tunnel::CompletionDriver& driver) {
  Backend::accept(*this, driver, live_, router_);
}

}  // namespace konn::server
