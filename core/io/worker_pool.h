#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>

#include "core/io/descriptor_reserve.h"

namespace konn::core::io {

// N threads, each running its own io_context (the Asio "io_context per thread" pool). A
// connection is assigned one context when it is created and lives there without locks; work for
// it from other threads is posted to that context.
class WorkerPool {
 public:
  // threads == 0 means one per core (at least one). With a `name`, thread i is named "name-i"
  // (top, /proc/PID/task/*/comm).
  explicit WorkerPool(unsigned threads = 0, std::string name = {});
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Starts the threads. Contexts stay alive (work guards) until stop().
  void start();
  // Lets the contexts finish outstanding handlers, then joins. Idempotent.
  void stop();

  // Round-robin choice of a context for a new connection. Thread-safe.
  asio::io_context& next();

  // The same choice, with a lease on `sockets` descriptor states of that context (see
  // DescriptorReserve): for a connection that will register sockets there. Take it before the
  // sockets are opened or accepted, and keep it for the connection's life.
  struct Placement {
    asio::io_context& ctx;
    DescriptorReserve::Lease lease;
    size_t index = 0;  // of ctx in the pool (place_at)
  };
  Placement place(size_t sockets = 1);
  // A lease on context `index` (a Placement's): for a connection that must live with another,
  // on the same thread.
  Placement place_at(size_t index, size_t sockets = 1);
  DescriptorReserve& reserve(size_t i) { return *reserves_[i]; }
  asio::io_context& at(size_t i) { return *contexts_[i]; }
  size_t size() const { return contexts_.size(); }

 private:
  // Before contexts_: a context's handlers may still hold leases when it is destroyed (leases
  // share their counts, so this order is for tidiness, not safety).
  std::vector<std::unique_ptr<DescriptorReserve>> reserves_;  // one per context
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards_;
  std::vector<std::thread> threads_;
  std::atomic<size_t> next_{0};
  std::string name_;
  bool started_ = false;
};

}  // namespace konn::core::io
