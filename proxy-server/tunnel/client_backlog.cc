#include "proxy-server/tunnel/client_backlog.h"

#include "proxy-server/backend/backend.h"

namespace konn::server {

void ClientBacklog::bind(std::shared_ptr<Backend> backend, std::weak_ptr<Frontend> owner) {
  backend->watch_client(this, std::move(owner));
  std::lock_guard lock(mu_);
  backend_ = std::move(backend);
}

void ClientBacklog::added(size_t n) {
  std::shared_ptr<Backend> b;
  {
    std::lock_guard lock(mu_);
    if (!backend_ || n == 0) return;
    if (waiting_ == 0) since_ = Clock::now();
    waiting_ += static_cast<int64_t>(n);
    b = backend_;
  }
  b->client_backlog(static_cast<int64_t>(n));
}

void ClientBacklog::taken(size_t n) {
  std::shared_ptr<Backend> b;
  int64_t delta = 0;
  {
    std::lock_guard lock(mu_);
    if (!backend_ || n == 0) return;
    delta = std::min(waiting_, static_cast<int64_t>(n));
    waiting_ -= delta;
    since_ = Clock::now();
    b = backend_;
  }
  if (delta > 0) b->client_backlog(-delta);
}

void ClientBacklog::release() {
  std::shared_ptr<Backend> b;
  int64_t delta = 0;
  {
    std::lock_guard lock(mu_);
    b = std::move(backend_);
    backend_ = nullptr;
    delta = waiting_;
    waiting_ = 0;
  }
  if (!b) return;
  b->unwatch_client(this);
  if (delta > 0) b->client_backlog(-delta);
}

ClientBacklog::Clock::duration ClientBacklog::stalled_for(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  if (waiting_ == 0) return Clock::duration::zero();
  return now - since_;
}

int64_t ClientBacklog::waiting() const {
  std::lock_guard lock(mu_);
  return waiting_;
}

}  // namespace konn::server
