#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <asio/any_io_executor.hpp>
#include <asio/execution_context.hpp>
#include <asio/ssl/context.hpp>

#include "core/h2/connection.h"
#include "core/io/asio_compat.h"

namespace konn::core::konnectivity {

// Where the proxy-server's frontend listens, and how to reach it.
struct FrontendAddress {
  std::string unix_path;  // set: h2c over this unix socket; empty: TCP with mutual TLS
  std::string host;       // TCP: the proxy-server's name or IP (IPv6 without brackets)
  uint16_t port = 0;
  // TCP: the name its certificate must carry (and SNI); the host unless --konnectivity-server-name.
  std::string server_name;
  // TCP: trusted CA and client certificate (make_client_context, no ALPN: h2 is offered per
  // connection).
  std::shared_ptr<asio::ssl::context> tls;
  // Bounds one connection attempt (connect, TLS handshake). A dial waits for it no longer than
  // its own timeout.
  std::chrono::milliseconds connect_timeout{30000};
};

// The HTTP/2 connections (core/h2, client role) that carry a Dialer's `/ProxyService/Proxy`
// calls: one per io thread that dials, shared by every call started on that thread, as
// kube-apiserver shares one connection among its tunnels. So the thread of a tunnel is the thread
// of its connection: a packet is read, handled and answered there, and its bytes reach the
// tunnel's reader without a post to another thread (the agent's server connections live the same
// way, beside their endpoint connections).
//
// A connection is made when a dial on its thread finds none (dials meanwhile wait for it), and
// replaced when it closed or the proxy-server sent GOAWAY (its calls go on until they end). It
// stays open while idle: the next dial does not pay for a connection.
//
// Thread-safety: start_call() runs on the calling coroutine's executor, which must be one thread
// (an io_context run by one thread); each connection is touched only there. The destructor
// closes each connection on its thread (its calls end UNAVAILABLE), or at once when that
// io_context is stopped or is the caller's.
class ProxyConnections {
 public:
  explicit ProxyConnections(FrontendAddress address);
  ~ProxyConnections();
  ProxyConnections(const ProxyConnections&) = delete;
  ProxyConnections& operator=(const ProxyConnections&) = delete;

  static constexpr char kProxyPath[] = "/ProxyService/Proxy";
  // The largest message accepted from the proxy-server (its DATA are at most 1 MiB; upstream's
  // forward what an agent sent).
  static constexpr size_t kMaxMessageBytes = 64 * 1024 * 1024;

  struct Call {
    std::shared_ptr<h2::Stream> stream;  // null on failure
    std::string error;                   // why not, e.g. "connect to unix:/s: No such file..."
    bool timed_out = false;              // no connection by the deadline
  };
  // Starts a call on this thread's connection, connecting first when there is none, by
  // `deadline` at the latest, and sends `first` on it (a message framed for
  // Stream::send_framed): the request's headers and that message leave in one write. The
  // callbacks run on this thread, inline, as core/h2 delivers.
  io::Awaitable<Call> start_call(h2::StreamCallbacks callbacks,
                                 std::chrono::steady_clock::time_point deadline,
                                 std::string first);

  // Calls started and not yet ended, over every thread.
  size_t open_calls() const { return shared_->open_calls.load(); }
  // Connections made so far (tests).
  size_t connections_made() const { return shared_->connections_made.load(); }
  // "unix:/path" or "host:port", for messages.
  const std::string& where() const { return shared_->where; }

  // What connection attempts use; they may outlive this object (a connect under way when it
  // goes).
  struct Shared {
    FrontendAddress address;
    std::string where;
    h2::ConnectionOptions options;
    std::atomic<size_t> open_calls{0};
    std::atomic<size_t> connections_made{0};
  };
  struct Slot;

 private:
  std::shared_ptr<Slot> slot_for(const asio::any_io_executor& ex);

  std::shared_ptr<Shared> shared_;
  // Per-thread state, keyed by the io_context; the map is locked only to find a slot.
  std::mutex mu_;
  std::unordered_map<const asio::execution_context*, std::shared_ptr<Slot>> slots_;
};

}  // namespace konn::core::konnectivity
