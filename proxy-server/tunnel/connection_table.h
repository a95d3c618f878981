#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace konn::server {

class Frontend;

// The established tunnels of one backend, keyed by the agent-assigned connectID. Thread-safe:
// one mutex, held only for map operations (never while calling into a Frontend).
class ConnectionTable {
 public:
  void add(int64_t connect_id, std::shared_ptr<Frontend> frontend);
  std::shared_ptr<Frontend> find(int64_t connect_id) const;
  std::shared_ptr<Frontend> take(int64_t connect_id);
  std::vector<std::shared_ptr<Frontend>> take_all();
  std::vector<std::shared_ptr<Frontend>> snapshot() const;
  // The tunnels with their connectIDs (the status page).
  std::vector<std::pair<int64_t, std::shared_ptr<Frontend>>> entries() const;
  // Lock-free (a relaxed read of a count kept under the lock): read per dial by the agent
  // choice (BackendRegistry) for every candidate.
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<int64_t, std::shared_ptr<Frontend>> conns_;
  std::atomic<size_t> size_{0};  // conns_.size(), written under mu_
};

}  // namespace konn::server
