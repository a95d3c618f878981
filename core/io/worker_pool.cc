#include "core/io/worker_pool.h"

namespace konn::core::io {

WorkerPool::WorkerPool(unsigned threads) {
  if (threads == 0) threads = std::max(1U, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < threads; ++i) {
    // Concurrency hint 1: each context is run by exactly one thread, so Asio may skip locking.
    contexts_.push_back(std::make_unique<asio::io_context>(1));
  }
}

WorkerPool::~WorkerPool() { stop(); }

void WorkerPool::start() {
  if (started_) return;
  started_ = true;
  for (auto& ctx : contexts_) {
    guards_.emplace_back(ctx->get_executor());
    threads_.emplace_back([c = ctx.get()] { c->run(); });
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

}  // namespace konn::core::io
