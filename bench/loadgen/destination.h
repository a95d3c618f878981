#pragma once

#include <cstdint>
#include <string>

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
// No step relies on a half-close (microsocks and the Konnectivity protocol do not pass one on).
namespace wire {
constexpr char kDownload = 'D';
constexpr char kUpload = 'U';
constexpr char kEcho = 'E';
constexpr char kIdle = 'I';
constexpr char kHose = 'H';
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

// Listens, prints "listening on 127.0.0.1:PORT" on stdout, and serves until SIGINT/SIGTERM.
// Returns the exit status. Upload check failures are also counted on stderr.
int run_destination(const DestinationOptions& options);

}  // namespace konn::bench
