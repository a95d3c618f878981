#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>

namespace konn::core::io {

// N threads, each running its own io_context (the Asio "io_context per thread" pool). A
// connection is assigned one context when it is created and lives there without locks; work for
// it from other threads is posted to that context.
class WorkerPool {
 public:
  // threads == 0 means one per core (at least one).
  explicit WorkerPool(unsigned threads = 0);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Starts the threads. Contexts stay alive (work guards) until stop().
  void start();
  // Lets the contexts finish outstanding handlers, then joins. Idempotent.
  void stop();

  // Round-robin choice of a context for a new connection. Thread-safe.
  asio::io_context& next();
  asio::io_context& at(size_t i) { return *contexts_[i]; }
  size_t size() const { return contexts_.size(); }

 private:
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards_;
  std::vector<std::thread> threads_;
  std::atomic<size_t> next_{0};
  bool started_ = false;
};

}  // namespace konn::core::io
