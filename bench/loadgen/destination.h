#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

namespace konn::bench {

// The destination every workload reaches (directly or through the proxy under test), run as its
// own process (`konn-loadgen serve`) so its CPU is neither the client's nor the daemon's.
// The client speaks first; its first byte picks what the connection does:
//   'D' + u64 n (little endian)  the destination sends n pattern bytes, then reads to EOF
//   'U' + u64 n                  the client sends n pattern bytes; the destination checks them
//                                and answers 'K' (all there, all right) or 'F', then reads to EOF
//   'E'                          echo everything until EOF
//   'I'                          idle: read (and drop) until EOF
//   'H'                          hose: send pattern bytes until the connection fails
//   'S' + u64 seed + u64 n       seeded download: the destination sends the first n bytes of
//                                SeededBytes(seed), then reads to EOF (the soak test hashes them)
//   'X' + u64 n                  hashed echo: the destination echoes n bytes, then sends the
//                                32-byte SHA-256 of what it received, then reads to EOF
// No step relies on a half-close (microsocks and the Konnectivity protocol do not pass one on).
namespace wire {
constexpr char kDownload = 'D';
constexpr char kUpload = 'U';
constexpr char kEcho = 'E';
constexpr char kIdle = 'I';
constexpr char kHose = 'H';
constexpr char kSeeded = 'S';
constexpr char kHashedEcho = 'X';
constexpr char kUploadOk = 'K';
constexpr char kUploadBad = 'F';
}  // namespace wire

struct DestinationOptions {
  std::string bind = "127.0.0.1";
  int port = 0;
  int threads = 1;
  // Bytes per write of 'D' and 'H'.
  size_t chunk = 256 * 1024;
};

// The destination running in this process: listens on construction, serves on its own threads,
// stops on destruction (or stop()).
class Destination {
 public:
  explicit Destination(const DestinationOptions& options);
  ~Destination();
  Destination(const Destination&) = delete;
  Destination& operator=(const Destination&) = delete;

  uint16_t port() const { return port_; }
  // Connections accepted and not yet closed (the soak test checks that none is left).
  int64_t open_connections() const { return open_->load(); }
  // Connections accepted so far.
  int64_t accepted() const { return accepted_->load(); }
  // Hashed-echo requests whose bytes arrived complete.
  int64_t echoes_completed() const { return echoes_->load(); }
  void stop();

 private:
  DestinationOptions options_;
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor_;
  uint16_t port_ = 0;
  // Shared with the connection coroutines, which may end after stop().
  std::shared_ptr<std::atomic<int64_t>> open_ = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<std::atomic<int64_t>> accepted_ = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<std::atomic<int64_t>> echoes_ = std::make_shared<std::atomic<int64_t>>(0);
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

// Listens, prints "listening on 127.0.0.1:PORT" on stdout, and serves until SIGINT/SIGTERM.
// Returns the exit status. Upload check failures are also counted on stderr.
int run_destination(const DestinationOptions& options);

}  // namespace konn::bench
