#include "tests/support/process_runner.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <signal.h>
#include <sstream>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/loopback.h"

extern char** environ;

namespace konn::testsupport {
namespace {

std::string make_temp_log() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/konn-proc-XXXXXX.log";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  int fd = mkstemps(buf.data(), 4);
  if (fd < 0) throw std::runtime_error("mkstemps " + tmpl + ": " + std::strerror(errno));
  close(fd);
  return buf.data();
}

std::string resolve_binary(const ProcessOptions& o) {
  if (o.binary.find('/') != std::string::npos) return o.binary;
  if (!o.search_path) return Process::bin_path(o.binary);
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + o.binary;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw std::runtime_error(o.binary + " not found on PATH");
}

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

bool unix_socket_accepts(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) {
    close(fd);
    return false;
  }
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

}  // namespace

std::string bin_dir() {
  const char* dir = std::getenv("KONN_BIN_DIR");
  return dir != nullptr && *dir != '\0' ? dir : KONN_DEFAULT_BIN_DIR;
}

std::string source_dir() {
  const char* dir = std::getenv("KONN_SOURCE_DIR");
  return dir != nullptr && *dir != '\0' ? dir : KONN_DEFAULT_SOURCE_DIR;
}

std::string Process::bin_path(const std::string& name) { return bin_dir() + "/" + name; }

bool Process::bin_exists(const std::string& name) {
  return access(bin_path(name).c_str(), X_OK) == 0;
}

Process::Process(ProcessOptions options) {
  std::string exe = resolve_binary(options);
  if (access(exe.c_str(), X_OK) != 0) throw std::runtime_error("cannot execute " + exe);

  log_path_ = options.log_path;
  if (log_path_.empty()) {
    log_path_ = make_temp_log();
    owns_log_ = true;
  }

  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<std::string> argv_s;
  argv_s.push_back(exe);
  argv_s.insert(argv_s.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::map<std::string, std::string> env_map;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env_map[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : options.env) env_map[k] = v;
  std::vector<std::string> env_s;
  for (const auto& [k, v] : env_map) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  int log_fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int out_fd = options.stdout_path.empty() ? -1
                                           : open(options.stdout_path.c_str(),
                                                  O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  std::string in_path = options.stdin_path.empty() ? "/dev/null" : options.stdin_path;
  int in_fd = open(in_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (log_fd < 0 || in_fd < 0 || (!options.stdout_path.empty() && out_fd < 0)) {
    int err = errno;
    if (log_fd >= 0) close(log_fd);
    if (out_fd >= 0) close(out_fd);
    if (in_fd >= 0) close(in_fd);
    throw std::runtime_error("cannot open redirections for " + exe + ": " + std::strerror(err));
  }

  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    if (out_fd >= 0) close(out_fd);
    close(in_fd);
    throw std::runtime_error("fork failed: " + std::string(std::strerror(errno)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    // A process group of its own, so that what it starts (a shell pipeline's other commands, an
    // exec plugin) is ended with it: see ~Process.
    setpgid(0, 0);
    dup2(in_fd, 0);
    dup2(out_fd >= 0 ? out_fd : log_fd, 1);
    dup2(log_fd, 2);
    // Nothing else of the parent's reaches the child: descriptors opened without O_CLOEXEC (Asio
    // opens sockets without it) would otherwise live on in the daemon, and a test's connection
    // would not close when the test closes it (the soak test saw a tunnel held open by a restarted
    // agent that had inherited the client's socket).
    if (close_range(3, ~0U, 0) != 0) {
      for (int fd = 3; fd < 65536; ++fd) close(fd);
    }
    // Signals ignored or blocked by the test runner must not leak into the daemon.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  pid_ = pid;
  setpgid(pid, pid);  // also here, so the group exists before the parent can signal it
  close(log_fd);
  if (out_fd >= 0) close(out_fd);
  close(in_fd);
}

Process::~Process() {
  if (pid_ > 0 && !reap(false)) {
    ::kill(pid_, SIGKILL);
    reap(true);
  }
  // Whatever the child started and left behind (`sh -c "sleep 60 | openssl s_server ..."`
  // outlived its shell and every test run): PR_SET_PDEATHSIG covers the direct child only.
  if (pid_ > 0) ::kill(-pid_, SIGKILL);
  if (owns_log_) unlink(log_path_.c_str());
}

std::string Process::log() const {
  std::ifstream in(log_path_, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t Process::count_in_log(std::string_view needle) const {
  std::string text = log();
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos;
       pos = text.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

bool Process::reap(bool block) const {
  if (exited_) return true;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    exited_ = true;
    status_ = decode_status(status);
  }
  return exited_;
}

bool Process::running() const { return !reap(false); }

std::optional<int> Process::wait_exit(std::chrono::milliseconds timeout) const {
  if (eventually([&] { return reap(false); }, timeout)) return status_;
  return std::nullopt;
}

void Process::kill(int sig) const {
  if (!reap(false)) ::kill(pid_, sig);
}

int Process::terminate(std::chrono::milliseconds grace) {
  kill(SIGTERM);
  if (auto code = wait_exit(grace)) return *code;
  kill(SIGKILL);
  reap(true);
  return status_;
}

bool Process::wait_for_log(std::string_view needle, std::chrono::milliseconds timeout,
                           size_t occurrences) const {
  bool found = false;
  eventually(
      [&] {
        bool gone = !running();
        found = count_in_log(needle) >= occurrences;
        return found || gone;
      },
      timeout);
  return found;
}

bool Process::wait_for_tcp_port(uint16_t port, std::chrono::milliseconds timeout) const {
  bool ok = false;
  eventually(
      [&] {
        ok = tcp_port_accepts(port);
        return ok || !running();
      },
      timeout);
  return ok;
}

bool Process::wait_for_unix_socket(const std::string& path,
                                   std::chrono::milliseconds timeout) const {
  bool ok = false;
  eventually(
      [&] {
        ok = unix_socket_accepts(path);
        return ok || !running();
      },
      timeout);
  return ok;
}

RunResult run_process(ProcessOptions options, std::chrono::milliseconds timeout) {
  RunResult result;
  Process p(std::move(options));
  if (auto code = p.wait_exit(timeout)) {
    result.exit_code = *code;
  } else {
    result.timed_out = true;
    p.kill(SIGKILL);
    p.wait_exit(5s);
  }
  result.output = p.log();
  return result;
}

}  // namespace konn::testsupport
