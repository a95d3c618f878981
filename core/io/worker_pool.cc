#include "core/io/worker_pool.h"

#include <pthread.h>

#include <asio/steady_timer.hpp>

namespace konn::core::io {

WorkerPool::WorkerPool(unsigned threads, std::string name) : name_(std::move(name)) {
  if (threads == 0) threads = std::max(1U, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < threads; ++i) {
    // Concurrency hint 1: each context is run by exactly one thread, so Asio may skip locking.
    contexts_.push_back(std::make_unique<asio::io_context>(1));
    // Creates the context's reactor now (its epoll, eventfd and timerfd descriptors) instead of
    // on its first socket or timer: an idle daemon then has the same descriptor count right
    // after it starts as after it carried traffic, so a leak shows as a difference.
    asio::steady_timer prime(*contexts_.back());
    reserves_.push_back(std::make_unique<DescriptorReserve>(*contexts_.back()));
  }
}

WorkerPool::~WorkerPool() { stop(); }

void WorkerPool::start() {
  if (started_) return;
  started_ = true;
  for (size_t i = 0; i < contexts_.size(); ++i) {
    guards_.emplace_back(contexts_[i]->get_executor());
    std::string name = name_.empty() ? std::string() : name_ + "-" + std::to_string(i);
    threads_.emplace_back([c = contexts_[i].get(), name = std::move(name)] {
      if (!name.empty()) pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
      c->run();
    });
  }
}

void WorkerPool::stop() {
  guards_.clear();
  for (auto& ctx : contexts_) ctx->stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

asio::io_context& WorkerPool::next() {
  return *contexts_[next_.fetch_add(1, std::memory_order_relaxed) % contexts_.size()];
}

WorkerPool::Placement WorkerPool::place(size_t sockets) {
  size_t i = next_.fetch_add(1, std::memory_order_relaxed) % contexts_.size();
  return place_at(i, sockets);
}

WorkerPool::Placement WorkerPool::place_at(size_t index, size_t sockets) {
  size_t i = index % contexts_.size();
  return Placement{*contexts_[i], reserves_[i]->take(sockets), i};
}

}  // namespace konn::core::io
