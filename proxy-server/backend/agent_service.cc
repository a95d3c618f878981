#include "proxy-server/backend/agent_service.h"

#include "proxy-server/backend/backend.h"

namespace konn::server {

void AgentServiceImpl::accept(core::tunnel::CompletionDriver& driver, bool shared_listener) {
  Backend::accept(*this, driver, live_, router_, shared_listener);
}

}  // namespace konn::server
