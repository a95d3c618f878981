#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <asio/ip/tcp.hpp>

#include "core/io/asio_compat.h"
#include "core/konnectivity/dialer.h"
#include "core/log/recent_events.h"
#include "core/net/resolver.h"
#include "socks5/socks5_metrics.h"
#include "socks5/socks5_options.h"
#include "socks5/user_db.h"

namespace konn::socks5 {

struct SessionHandle;

// What a session's close line reports, and its log prefix.
struct SessionInfo {
  uint64_t id = 0;
  asio::ip::tcp::endpoint client;
  std::string user = "-";
  std::string command = "-";
  std::string destination = "-";
  std::string reply = "-";      // the REP we sent, by name
  int reply_code = -1;          // the REP we sent; -1 before any
  std::string reason = "done";  // why it ended
  uint64_t bytes_up = 0;        // client → destination
  uint64_t bytes_down = 0;      // destination → client
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  Socks5Metrics* metrics = nullptr;  // counts each reply sent; may be null
  SessionHandle* live = nullptr;     // the byte counts /status.json reads; may be null

  std::string log_prefix() const { return "[S" + std::to_string(id) + "] "; }
};

// Lets shutdown close a session from outside. `close` is set and cleared by the session, and
// only ever run on `executor` (so it never races the session). The rest is what /status.json
// shows of a live session: set by the session (the request once, under `mu`; the byte counts as
// the relay moves them, relaxed atomics) and read by the health listener's thread.
struct SessionHandle {
  asio::any_io_executor executor;
  std::function<void()> close;

  asio::ip::address client;  // set by admit(), before the handle is listed
  uint16_t client_port = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::atomic<uint64_t> bytes_up{0};
  std::atomic<uint64_t> bytes_down{0};
  mutable std::mutex mu;  // guards the request fields below (written once per session)
  std::string command;
  std::string destination;
  std::string via;  // "direct" or "konnectivity" once a request arrived
};

// A session that ended without what it asked for (a non-success reply, a failed authentication)
// or a connection refused at a limit: what /status.json shows in its recent failures.
struct SessionFailure {
  std::chrono::system_clock::time_point at;
  std::string client;
  std::string command;
  std::string destination;
  int reply_code = -1;  // SOCKS REP; -1 when none was sent
  std::string reply;
  std::string reason;
};

// Every live session, for graceful shutdown and limits. Thread-safe (one mutex).
class SessionRegistry {
 public:
  SessionRegistry(int max_total, int max_per_client)
      : max_total_(max_total), max_per_client_(max_per_client) {}

  // Why admit() said no.
  struct Refusal {
    std::string limit;  // metric label: "max_sessions" or "max_sessions_per_client"
    std::string text;   // for the log, e.g. "max-sessions 100 reached"
  };
  // Reserves a slot for a client; nullptr when a limit is reached (the caller closes the
  // connection without a word: no SOCKS message fits before the greeting). The slot frees itself
  // when the returned handle is destroyed.
  class Slot;
  // `client_port` is only shown (/status.json).
  std::unique_ptr<Slot> admit(const asio::ip::address& client, asio::any_io_executor ex,
                              Refusal* refusal, uint16_t client_port = 0);

  size_t active() const;
  // Posts `close` of every live session to its executor.
  void close_all();

  // The live sessions' handles, and the most connections one client holds (for the page): a
  // copy of pointers under the lock, read afterwards.
  std::vector<std::shared_ptr<const SessionHandle>> snapshot(size_t* most_per_client) const;
  // The last kFailuresKept failures (oldest first), and how many there were in all.
  static constexpr size_t kFailuresKept = 50;
  void record_failure(SessionFailure f) { failures_.record(std::move(f)); }
  const core::log::RecentEvents<SessionFailure>& failures() const { return failures_; }
  int max_total() const { return max_total_; }
  int max_per_client() const { return max_per_client_; }

 private:
  friend class Slot;
  void release(uint64_t id, const asio::ip::address& client);

  core::log::RecentEvents<SessionFailure> failures_{kFailuresKept};

  const int max_total_;
  const int max_per_client_;
  mutable std::mutex mu_;  // guards the maps and next_id_
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::weak_ptr<SessionHandle>> sessions_;
  std::unordered_map<std::string, int> per_client_;
};

class SessionRegistry::Slot {
 public:
  Slot(SessionRegistry& r, uint64_t id, asio::ip::address client,
       std::shared_ptr<SessionHandle> handle)
      : registry_(r), id_(id), client_(client), handle_(std::move(handle)) {}
  ~Slot() { registry_.release(id_, client_); }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  uint64_t id() const { return id_; }
  SessionHandle& handle() { return *handle_; }
  SessionRegistry& registry() { return registry_; }

 private:
  SessionRegistry& registry_;
  uint64_t id_;
  asio::ip::address client_;
  std::shared_ptr<SessionHandle> handle_;
};

// What a session needs from the server; all of it outlives every session.
struct SessionEnv {
  const Socks5Options& options;
  UserDb* users;                  // nullptr: no authentication (method 00)
  core::net::Resolver& resolver;  // the one of this session's io_context
  // Where password hashes are checked: crypt(3) SHA-512 takes milliseconds of CPU, which must
  // not stall the other sessions of this session's thread.
  asio::any_io_executor auth_executor;
  // --konnectivity-*: CONNECT goes through this proxy-server (null: dial directly).
  core::konnectivity::Dialer* konnectivity = nullptr;
  Socks5Metrics* metrics = nullptr;  // may be null (unit tests)
};

// One client connection, from greeting to close: greet → auth → request → dial → reply →
// relay, written as straight-line code (the position in the coroutine is the state). Logs one
// close line. Runs on the client socket's executor.
core::io::Awaitable<void> run_session(asio::ip::tcp::socket client, SessionEnv env,
                                      std::unique_ptr<SessionRegistry::Slot> slot);

}  // namespace konn::socks5
