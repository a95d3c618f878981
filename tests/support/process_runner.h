#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace konn::testsupport {

using namespace std::chrono_literals;

// Where the built binaries are: $KONN_BIN_DIR (set by ctest), else the build tree this library
// was configured for.
std::string bin_dir();
// The source tree: $KONN_SOURCE_DIR, else the one this library was configured from.
std::string source_dir();

// How to start a child process.
struct ProcessOptions {
  // A name looked up in $KONN_BIN_DIR ("proxy-server"), or a path containing '/', or a program
  // found on $PATH when `search_path` is set ("node").
  std::string binary;
  std::vector<std::string> args;
  // Added to (or replacing entries of) the parent's environment.
  std::vector<std::pair<std::string, std::string>> env;
  bool search_path = false;
  // Where stderr goes (appended). Empty: a fresh file in the system temp dir, removed with the
  // Process.
  std::string log_path;
  // stdout goes to this file; empty: the same file as stderr.
  std::string stdout_path;
  // stdin comes from this file; empty: /dev/null.
  std::string stdin_path;
};

// A child process started from a test, with stderr captured to a file that tests grep.
//
// RAII: the destructor SIGKILLs a child that still runs and reaps it. The child also gets SIGKILL
// when the thread that started it dies (PR_SET_PDEATHSIG), so a crashed or timed-out test leaves
// no daemon behind; start processes from the test's main thread, not from short-lived threads.
class Process {
 public:
  // Starts the child. Throws std::runtime_error when the binary cannot be found or started.
  explicit Process(ProcessOptions options);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // bin_dir()/<name>.
  static std::string bin_path(const std::string& name);
  // True when bin_dir()/<name> exists and is executable.
  static bool bin_exists(const std::string& name);

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  // Everything captured so far.
  std::string log() const;
  // Occurrences of `needle` in the captured output.
  size_t count_in_log(std::string_view needle) const;

  // Waits until the captured output contains `needle` at least `occurrences` times. Returns false
  // at the deadline or as soon as the process has exited without printing it.
  bool wait_for_log(std::string_view needle, std::chrono::milliseconds timeout,
                    size_t occurrences = 1) const;
  // Waits until 127.0.0.1:port accepts a TCP connection (false at the deadline or on exit).
  bool wait_for_tcp_port(uint16_t port, std::chrono::milliseconds timeout) const;
  // Waits until a unix socket at `path` accepts a connection.
  bool wait_for_unix_socket(const std::string& path, std::chrono::milliseconds timeout) const;

  // Non-blocking: has the child not exited yet?
  bool running() const;
  // Waits for exit; returns the exit code, or 128 + signal number for a signal, or nullopt at
  // the deadline.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) const;
  // Sends `sig` (SIGKILL by default) if the child still runs.
  void kill(int sig) const;
  // SIGTERM, then SIGKILL once `grace` passed; returns the exit status as wait_exit does.
  int terminate(std::chrono::milliseconds grace = 5s);

 private:
  bool reap(bool block) const;

  pid_t pid_ = -1;
  std::string log_path_;
  bool owns_log_ = false;
  mutable bool exited_ = false;
  mutable int status_ = 0;
};

// Runs a process to completion (stdin /dev/null) and returns its exit status and output.
struct RunResult {
  int exit_code = -1;  // as Process::wait_exit; -1 when it timed out (and was killed)
  std::string output;  // stderr and stdout together, unless stdout_path was given
  bool timed_out = false;
};
RunResult run_process(ProcessOptions options, std::chrono::milliseconds timeout = 10s);

// Polls `condition` every few milliseconds until it holds or `timeout` passes; returns whether it
// held. For conditions that have no event to wait on (another process's state).
template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    struct timespec ts {
      0, 5'000'000
    };
    nanosleep(&ts, nullptr);
  }
}

}  // namespace konn::testsupport
