#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace konn::core::endpoint {

class EndpointConnection;

// The endpoint connections of one server stream, findable by dialID (from DIAL_REQ until the
// connection is gone, so DIAL_CLS can reach it) and by connectID (once DIAL_RSP is about to be
// sent). It also hands out connectIDs: per stream, from 1, monotonically.
//
// Lock: `mu_` guards both maps, `next_id_` and `closed_`. It is held only for the map operation
// itself, never while calling into a connection, so any thread (the stream's reactions,
// connection executors) may use the table.
class ConnectionTable {
 public:
  using Ptr = std::shared_ptr<EndpointConnection>;

  int64_t allocate_connect_id();
  // Registers a connection that is dialing. False when `dial_id` is already in use or the table
  // was closed by take_all() (the stream is gone).
  bool add_dial(int64_t dial_id, Ptr conn);
  // Makes `conn` findable by `connect_id`. False when it was removed meanwhile.
  bool establish(int64_t dial_id, int64_t connect_id, const EndpointConnection* conn);
  Ptr find(int64_t connect_id) const;
  Ptr find_dial(int64_t dial_id) const;
  // Removes the entries that point at `conn` (never another connection reusing an id).
  void remove(int64_t dial_id, int64_t connect_id, const EndpointConnection* conn);
  // Empties the table and refuses new entries; the caller closes what it gets.
  std::vector<Ptr> take_all();
  // Connections registered (dialing or established).
  size_t size() const;
  // Every connection registered (the status page).
  std::vector<Ptr> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<int64_t, Ptr> by_dial_;     // every live connection
  std::unordered_map<int64_t, Ptr> by_connect_;  // established ones
  int64_t next_id_ = 0;
  bool closed_ = false;
};

}  // namespace konn::core::endpoint
