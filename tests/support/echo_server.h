#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

namespace konn::testsupport {

// A TCP echo server on 127.0.0.1:<port 0>, with its own thread. Each connection echoes every
// byte back (never reading more until the previous write finished, so a client that stops
// reading stalls only its own connection); EOF from the client closes the connection after the
// echo is flushed.
class EchoServer {
 public:
  // With `hash`, each connection also computes the SHA-256 of the bytes it received; digests()
  // lists them (lowercase hex) for the connections that ended.
  explicit EchoServer(bool hash = false);
  ~EchoServer();
  EchoServer(const EchoServer&) = delete;
  EchoServer& operator=(const EchoServer&) = delete;

  uint16_t port() const { return port_; }
  // "127.0.0.1:<port>"
  std::string address() const;
  // Connections accepted so far, and those still open.
  size_t accepted() const { return accepted_.load(); }
  size_t active() const { return active_.load(); }
  uint64_t bytes_echoed() const { return bytes_.load(); }
  std::vector<std::string> digests() const;

  // Used by the connection coroutines.
  void add_digest(std::string hex);

 private:
  asio::io_context ctx_;
  asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<size_t> accepted_{0};
  std::atomic<size_t> active_{0};
  std::atomic<uint64_t> bytes_{0};
  const bool hash_;
  mutable std::mutex mu_;
  std::vector<std::string> digests_;
  std::thread thread_;
};

}  // namespace konn::testsupport
