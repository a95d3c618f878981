#pragma once

// Helpers for the socks5 end-to-end tests: spawn the built daemon and real clients, local
// HTTP/DNS fixtures, bounded waits. Everything binds 127.0.0.1 port 0 and uses a temp dir.

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ip/udp.hpp>

namespace konn::socks5::e2e {

std::string bin_dir();
std::string source_dir();

// A fresh directory under /tmp, removed with everything in it.
struct TempDir {
  TempDir();
  ~TempDir();
  std::filesystem::path path;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& text);

// Polls `cond` until true or `timeout` passes (event-driven fixtures make most waits instant).
bool wait_until(const std::function<bool()>& cond, std::chrono::milliseconds timeout);

// A child process with stdout+stderr going to `log`. Sent SIGTERM (then SIGKILL) when destroyed.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::string& log,
          const std::vector<std::string>& extra_env = {});
  ~Process();
  pid_t pid() const { return pid_; }
  // Sends a signal; returns immediately.
  void signal(int sig);
  // Waits up to `timeout` for exit; returns the exit status or -1 when still running.
  int wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

// Runs a command to completion (bounded by `timeout`), capturing stdout; stderr goes to the
// returned `err`.
struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
RunResult run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
              const std::vector<std::string>& extra_env = {});

// The socks5 daemon started from the build's bin dir on 127.0.0.1:0.
class Socks5Daemon {
 public:
  explicit Socks5Daemon(const TempDir& dir, std::vector<std::string> flags = {});
  uint16_t port() const { return port_; }
  std::string log() const { return read_file(log_); }
  // Waits until the log contains `text`.
  bool log_has(const std::string& text,
               std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
  Process& process() { return *proc_; }
  // The health/metrics listener's port, from the log (0 when it did not say).
  uint16_t health_port() const;
  // One sample of /metrics ("name{labels}" as exposed), or -1 when absent.
  double metric(const std::string& series) const;

 private:
  std::string log_;
  std::unique_ptr<Process> proc_;
  uint16_t port_ = 0;
};

// A minimal HTTP/1.1 server on `address` port 0 answering every request with `body`
// (Connection: close). Throws std::system_error when `address` cannot be bound.
class HttpServer {
 public:
  explicit HttpServer(std::string body, const std::string& address = "127.0.0.1");
  ~HttpServer();
  uint16_t port() const { return port_; }
  int requests() const { return requests_; }

 private:
  asio::io_context ctx_;
  asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
  std::string body_;
  uint16_t port_;
  std::atomic<int> requests_{0};
  // Connections being served, each on a thread of its own with a socket of ctx_: the
  // destructor shuts them down and joins their threads, so no socket outlives ctx_.
  std::mutex mu_;
  std::set<int> open_;
  std::vector<std::thread> served_;
};

// A DNS server (UDP) answering A queries from `records` and NXDOMAIN for anything else.
class FakeDns {
 public:
  explicit FakeDns(std::map<std::string, std::string> records);
  ~FakeDns();
  std::string address() const;

 private:
  asio::io_context ctx_;
  asio::ip::udp::socket socket_;
  std::thread thread_;
  std::map<std::string, std::string> records_;
  std::atomic<bool> stop_{false};
};

// A user:hash line for the users file (SHA-512 crypt).
std::string user_line(const std::string& user, const std::string& password);

}  // namespace konn::socks5::e2e
