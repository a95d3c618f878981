#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/ip/address.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include "core/io/asio_compat.h"

struct ares_channeldata;
struct ares_addrinfo;

namespace konn::core::net {

// Asynchronous DNS through c-ares, driven by one executor (one io_context thread): a lookup never
// blocks the thread, so other connections on it keep moving while a name resolves (what
// `getaddrinfo` in a thread pool or, worse, on the event loop cannot promise).
//
// Not thread-safe: create one Resolver per io_context and use it only from that context.
class Resolver {
 public:
  struct Options {
    // "ip[:port]" name servers; empty means the system's (/etc/resolv.conf).
    std::vector<std::string> servers;
    // Per-try timeout and number of tries per server (c-ares semantics).
    std::chrono::milliseconds timeout{2000};
    int tries = 2;
  };

  enum class Family { Any, V4, V6 };

  struct Result {
    // asio::error::host_not_found: the name does not exist (NXDOMAIN or no address records).
    // asio::error::host_not_found_try_again: no usable answer (timeout, SERVFAIL, refused).
    // asio::error::no_recovery: anything else (bad name, out of memory, shutting down).
    std::error_code ec;
    std::vector<asio::ip::address> addresses;  // in c-ares' order, duplicates removed
  };

  // Throws std::system_error when c-ares cannot start or a server address is invalid (startup).
  Resolver(asio::any_io_executor ex, Options options);
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // Resolves `host` (a name, or an IP literal which comes back unchanged). Completes on this
  // resolver's executor. Safe to abandon (cancel) the awaiting coroutine: the lookup then ends
  // in the background.
  io::Awaitable<Result> resolve(std::string host, Family family = Family::Any);

  // Queries not yet answered (for tests and shutdown).
  size_t pending() const { return pending_; }

 private:
  struct Watch;
  struct Lookup;

  static void on_socket_state(void* self, int fd, int readable, int writable);
  static void on_lookup_done(void* arg, int status, int timeouts, ::ares_addrinfo* res);
  void update_watch(int fd, bool readable, bool writable);
  void arm(const std::shared_ptr<Watch>& w, bool for_write);
  void process(int read_fd, int write_fd);
  void reschedule_timer();

  asio::any_io_executor ex_;
  asio::steady_timer timer_;
  ares_channeldata* channel_ = nullptr;
  std::unordered_map<int, std::shared_ptr<Watch>> watches_;
  size_t pending_ = 0;
  // Handlers check this before touching the resolver (it may be gone when they run).
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace konn::core::net
