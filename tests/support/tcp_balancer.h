#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

namespace konn::testsupport {

// An L4 load balancer on 127.0.0.1 for HA tests: each accepted connection goes to the next
// backend port (round-robin) that accepts a connection, and bytes are relayed both ways until
// either side closes. Agents behind it see one address and reach different servers, as behind a
// cloud load balancer. Runs on its own thread.
class TcpBalancer {
 public:
  TcpBalancer();
  ~TcpBalancer();
  TcpBalancer(const TcpBalancer&) = delete;
  TcpBalancer& operator=(const TcpBalancer&) = delete;

  uint16_t port() const { return port_; }
  // Replaces the backends (loopback ports); new connections use the new list.
  void set_backends(std::vector<uint16_t> ports);
  // Connections relayed so far.
  int connections() const { return connections_.load(); }

 private:
  void accept();
  std::vector<uint16_t> next_order();

  asio::io_context ctx_;
  asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::mutex mu_;
  std::vector<uint16_t> backends_;  // guarded by mu_
  size_t next_ = 0;                 // guarded by mu_
  std::atomic<int> connections_{0};
  std::thread thread_;
};

}  // namespace konn::testsupport
