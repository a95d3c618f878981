#pragma once

#include <cstdint>
#include <utility>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

namespace konn::testsupport {

// A TCP port on 127.0.0.1 that was free a moment ago (drawn below the kernel's ephemeral port
// range, bound, closed), so a later bind to port 0 never takes it. For daemons whose flags need
// a concrete port; a small race with other free_tcp_port() callers remains, so prefer port 0
// wherever the daemon reports what it bound.
uint16_t free_tcp_port();

// A listener on 127.0.0.1 whose accept queue is full and never drained: connects to it neither
// succeed nor fail until the dialler gives up (the kernel drops the SYNs). Used to make a dial
// pend for as long as a test needs.
class StuckListener {
 public:
  StuckListener();
  ~StuckListener();
  StuckListener(const StuckListener&) = delete;
  StuckListener& operator=(const StuckListener&) = delete;

  uint16_t port() const { return port_; }

 private:
  int listen_fd_ = -1;
  int filler_fd_ = -1;
  uint16_t port_ = 0;
};

// Two connected TCP sockets on 127.0.0.1, both on `ctx`: the first dialled, the second accepted.
std::pair<asio::ip::tcp::socket, asio::ip::tcp::socket> tcp_pair(asio::io_context& ctx);

// True when a TCP connect to 127.0.0.1:port completes within `timeout_ms`.
bool tcp_port_accepts(uint16_t port, int timeout_ms = 200);

}  // namespace konn::testsupport
