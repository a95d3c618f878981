#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <grpcpp/channel.h>

#include "core/io/asio_compat.h"
#include "konnectivity/client.grpc.pb.h"

namespace konn::bench {

using core::io::Awaitable;

// One established path from the load generator to a destination: a plain TCP connection, or a
// tunnel through the proxy under test (its handshake already done). Reads and writes of one
// stream run on one io_context; one read and one write may be in flight at once.
class Stream {
 public:
  virtual ~Stream() = default;
  // Up to buffer_size(b) bytes; EOF and failures come back as error codes.
  virtual Awaitable<std::pair<std::error_code, size_t>> read_some(asio::mutable_buffer b) = 0;
  // All of `b`.
  virtual Awaitable<std::error_code> write(asio::const_buffer b) = 0;
  // Ends the stream the way its protocol does (socket: close; Konnectivity: CLOSE_REQ, then
  // CLOSE_RSP and the end of the gRPC call). Bytes still arriving are discarded.
  virtual Awaitable<std::error_code> close() = 0;
  // Ends the stream abruptly, as a crashing client would: a socket is closed with SO_LINGER 0
  // (TCP sends RST; a unix socket's peer reads ECONNRESET when bytes were left unread), a
  // Konnectivity tunnel's call is cancelled without CLOSE_REQ.
  virtual Awaitable<void> reset() = 0;
};

// How the load generator reaches destinations: `--via=` on the command line.
//   direct                      TCP to the destination
//   socks5://HOST:PORT          SOCKS5 CONNECT, no authentication
//   connect://HOST:PORT         HTTP CONNECT over TCP (tinyproxy, squid, kubeproxy-http)
//   connect+unix:///PATH        HTTP CONNECT over a unix socket (proxy-server --mode=http-connect)
//   grpc+unix:///PATH           Konnectivity ProxyService/Proxy over a unix socket (gRPC callback
//                               API: one call per tunnel, calls spread over --grpc-channels)
struct Via {
  enum class Kind { Direct, Socks5, Connect, ConnectUnix, GrpcUnix };
  Kind kind = Kind::Direct;
  std::string host;  // Socks5, Connect
  uint16_t port = 0;
  std::string path;  // ConnectUnix, GrpcUnix
  int grpc_channels = 1;

  // Parses a --via value; throws std::invalid_argument naming what is wrong.
  static Via parse(const std::string& text);
  std::string to_string() const;
};

// Opens streams to destinations through one Via. Thread-safe.
class Opener {
 public:
  explicit Opener(Via via);
  ~Opener();
  Opener(const Opener&) = delete;
  Opener& operator=(const Opener&) = delete;

  // Opens a stream to `target` ("IPv4:port"). Returns the stream, or nullptr and why.
  Awaitable<std::pair<std::unique_ptr<Stream>, std::string>> open(const std::string& target);

  const Via& via() const { return via_; }

 private:
  Via via_;
  std::vector<std::unique_ptr<ProxyService::Stub>> stubs_;  // GrpcUnix: one per channel
  std::atomic<uint64_t> next_channel_{0};
};

}  // namespace konn::bench
