#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include "core/io/asio_compat.h"

namespace konn::core::admin {

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::string location;  // for redirects
};

// A named readiness check: returns nullopt when fine, or why it fails.
struct Check {
  std::string name;
  std::function<std::optional<std::string>()> run;
};

// Answers /readyz in the Kubernetes healthz style: "ok" (200) when every check passes, else 503
// listing each check as "[+]name ok" / "[-]name failed: why". `?verbose` lists them on success too.
Response readiness(const std::vector<Check>& checks, bool verbose);

// A small HTTP/1.1 server for health, readiness and metrics endpoints (every daemon has one or
// two). GET/HEAD only; one request per connection is enough for probes and scrapes, but
// keep-alive is honoured. Runs on its own thread with its own io_context, so a busy data plane
// never delays a liveness probe. Heads are parsed with core/http (http-parser); a head must
// arrive within 10 s and fit in 64 KiB.
class AdminServer {
 public:
  using Handler = std::function<Response(const std::string& query)>;
  // A handler that waits (a profile over N seconds): it runs as a coroutine on the admin thread,
  // and must wait on that thread's timers, never block it, so other requests keep being answered.
  using AsyncHandler = std::function<io::Awaitable<Response>(std::string query)>;

  AdminServer(std::string name, std::string bind_address, uint16_t port);
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Routes by exact path (query string passed to the handler). Register before start().
  void route(const std::string& path, Handler handler);
  void route_async(const std::string& path, AsyncHandler handler);
  // Binds and starts the thread. Throws std::system_error naming the address.
  void start();
  // As start(), for a listener on a port the user did not choose (`port_given` false): when that
  // default port is taken, logs a warning and returns false instead of throwing, so a second
  // instance still starts. A port the user asked for must bind, as with start().
  bool start_unless_default_taken(bool port_given);
  void stop();
  uint16_t port() const { return port_; }

 private:
  struct Session;
  void accept();
  io::Awaitable<Response> dispatch(std::string method, std::string target);

  std::string name_;
  std::string bind_address_;
  uint16_t port_;
  std::map<std::string, Handler> routes_;
  std::map<std::string, AsyncHandler> async_routes_;
  asio::io_context ctx_;
  asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
};

}  // namespace konn::core::admin
