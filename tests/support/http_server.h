#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

namespace konn::testsupport {

// A tiny HTTP/1.1 origin on 127.0.0.1:<port 0> with its own thread, for tunnel tests:
//   GET <page path>   200 with the body registered by add_page()
//   GET /bytes/N      200 with N bytes of pattern(0, N), written in 256 KiB pieces as the client
//                     reads (a client that stops reading stalls only its own connection)
//   anything else     404 "not found\n"
// Requests are served in order on a keep-alive connection; "Connection: close" or HTTP/1.0
// closes it after the response.
class HttpServer {
 public:
  HttpServer();
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves `body` (Content-Type text/plain) at `path` ("/hello"). Thread-safe.
  void add_page(const std::string& path, const std::string& body);

  uint16_t port() const { return port_; }
  // "127.0.0.1:<port>"
  std::string address() const;
  size_t requests() const { return requests_.load(); }

  // The bytes of /bytes/N from `offset` on: byte i is (i % 251), so any slice can be checked.
  static std::string pattern(uint64_t offset, size_t n);

  // Finds the page for `path`; used by the connection coroutines.
  bool find_page(const std::string& path, std::string* body);
  void count_request() { requests_.fetch_add(1); }

 private:
  asio::io_context ctx_;
  asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::mutex mu_;
  std::map<std::string, std::string> pages_;
  std::atomic<size_t> requests_{0};
  std::thread thread_;
};

}  // namespace konn::testsupport
