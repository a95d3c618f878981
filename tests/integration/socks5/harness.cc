#include "harness.h"

#include <crypt.h>
#include <fcntl.h>
#include <fstream>
#include <random>
#include <regex>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/read_until.hpp>
#include <asio/write.hpp>

#include "tests/support/prom_text.h"

extern char** environ;

namespace konn::socks5::e2e {

using namespace std::chrono_literals;
using asio::ip::tcp;
using asio::ip::udp;

std::string bin_dir() {
  const char* d = std::getenv("KONN_BIN_DIR");
  return d != nullptr ? d : "bin";
}

std::string source_dir() {
  const char* d = std::getenv("KONN_SOURCE_DIR");
  // Exception: catch_discover_tests keeps only the first ENVIRONMENT entry here, so the source
  // dir also comes in at compile time.
  return d != nullptr ? d : KONN_E2E_SOURCE_DIR;
}

TempDir::TempDir() {
  std::random_device rd;
  path = std::filesystem::temp_directory_path() /
         ("konn-socks5-e2e-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
  std::filesystem::create_directories(path);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

bool wait_until(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

namespace {

std::vector<char*> c_args(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

std::vector<std::string> merged_env(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& x : extra) env.push_back(x);
  return env;
}

pid_t spawn(const std::vector<std::string>& argv, int out_fd, int err_fd,
            const std::vector<std::string>& extra_env) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  auto args = c_args(argv);
  auto env_strings = merged_env(extra_env);
  auto envp = c_args(env_strings);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0].c_str(), &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("spawn " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

Process::Process(const std::vector<std::string>& argv, const std::string& log,
                 const std::vector<std::string>& extra_env) {
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("open " + log);
  pid_ = spawn(argv, fd, fd, extra_env);
  ::close(fd);
}

Process::~Process() {
  if (reaped_) return;
  ::kill(pid_, SIGTERM);
  if (wait(5s) < 0) {
    ::kill(pid_, SIGKILL);
    wait(5s);
  }
}

void Process::signal(int sig) { ::kill(pid_, sig); }

int Process::wait(std::chrono::milliseconds timeout) {
  if (reaped_) return decode(status_);
  bool done = wait_until(
      [&] {
        int st = 0;
        if (::waitpid(pid_, &st, WNOHANG) == pid_) {
          status_ = st;
          reaped_ = true;
        }
        return reaped_;
      },
      timeout);
  return done ? decode(status_) : -1;
}

RunResult run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
              const std::vector<std::string>& extra_env) {
  TempDir dir;
  auto out_path = dir.file("out");
  auto err_path = dir.file("err");
  int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  pid_t pid = spawn(argv, out, err, extra_env);
  ::close(out);
  ::close(err);
  RunResult r;
  int status = 0;
  bool done = wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, timeout);
  if (!done) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    r.err = "timed out\n";
  }
  r.exit_code = done ? decode(status) : -1;
  r.out = read_file(out_path);
  r.err += read_file(err_path);
  return r;
}

Socks5Daemon::Socks5Daemon(const TempDir& dir, std::vector<std::string> flags)
    : log_(dir.file("socks5-" + std::to_string(reinterpret_cast<uintptr_t>(this)) + ".log")) {
  std::vector<std::string> argv{bin_dir() + "/socks5", "--bind-address=127.0.0.1", "--port=0",
                                "--health-port=0", "--workers=2"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  proc_ = std::make_unique<Process>(argv, log_);
  std::regex re("listening on 127\\.0\\.0\\.1:([0-9]+)");
  std::smatch m;
  bool up = wait_until(
      [&] {
        auto text = log();
        if (!std::regex_search(text, m, re)) return false;
        port_ = static_cast<uint16_t>(std::stoi(m[1].str()));
        return true;
      },
      10s);
  if (!up) throw std::runtime_error("socks5 did not start; log:\n" + log());
}

bool Socks5Daemon::log_has(const std::string& text, std::chrono::milliseconds timeout) const {
  return wait_until([&] { return log().find(text) != std::string::npos; }, timeout);
}

uint16_t Socks5Daemon::health_port() const {
  std::regex re("health listening on .*:([0-9]+)");
  std::smatch m;
  std::string text;
  auto found = [&] {
    text = log();
    return std::regex_search(text, m, re);
  };
  return wait_until(found, 5s) ? static_cast<uint16_t>(std::stoi(m[1].str())) : 0;
}

double Socks5Daemon::metric(const std::string& series) const {
  auto r = run({"curl", "-sS", "--max-time", "5", "--noproxy", "*",
                "http://127.0.0.1:" + std::to_string(health_port()) + "/metrics"},
               10s);
  return testsupport::parse_prometheus_text(r.out).value_of(series).value_or(-1);
}

HttpServer::HttpServer(std::string body, const std::string& address)
    : acceptor_(ctx_, tcp::endpoint(asio::ip::make_address(address), 0)),
      body_(std::move(body)),
      port_(acceptor_.local_endpoint().port()) {
  thread_ = std::thread([this] {
    for (;;) {
      tcp::socket s(ctx_);
      std::error_code ec;
      acceptor_.accept(s, ec);
      if (ec) return;
      std::lock_guard lock(mu_);
      open_.insert(s.native_handle());
      served_.emplace_back([this, s = std::move(s)]() mutable {
        int fd = s.native_handle();
        std::string req;
        std::error_code e;
        asio::read_until(s, asio::dynamic_buffer(req), "\r\n\r\n", e);
        if (!e) {
          ++requests_;
          std::string resp = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                             std::to_string(body_.size()) + "\r\nConnection: close\r\n\r\n" + body_;
          asio::write(s, asio::buffer(resp), e);
          s.shutdown(tcp::socket::shutdown_send, e);
          char sink[256];
          while (!e) s.read_some(asio::buffer(sink), e);
        }
        std::lock_guard done(mu_);
        s.close(e);
        open_.erase(fd);
      });
    }
  });
}

HttpServer::~HttpServer() {
  ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
  thread_.join();
  std::vector<std::thread> served;
  {
    std::lock_guard lock(mu_);
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
    served.swap(served_);
  }
  for (auto& t : served) t.join();
}

FakeDns::FakeDns(std::map<std::string, std::string> records)
    : socket_(ctx_, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
      records_(std::move(records)) {
  thread_ = std::thread([this] {
    std::array<uint8_t, 1500> buf{};
    for (;;) {
      udp::endpoint peer;
      std::error_code ec;
      size_t n = socket_.receive_from(asio::buffer(buf), peer, 0, ec);
      if (ec || stop_) return;
      if (n < 12) continue;
      size_t pos = 12;
      std::string name;
      while (pos < n && buf[pos] != 0) {
        size_t len = buf[pos];
        if (!name.empty()) name += '.';
        name.append(reinterpret_cast<const char*>(&buf[pos + 1]), len);
        pos += len + 1;
      }
      pos += 1;
      if (pos + 4 > n) continue;
      uint16_t qtype = static_cast<uint16_t>(buf[pos] << 8 | buf[pos + 1]);
      std::vector<uint8_t> out(buf.begin(), buf.begin() + static_cast<long>(pos + 4));
      out[2] = 0x84;
      out[3] = 0x00;
      for (int i = 6; i < 12; ++i) out[static_cast<size_t>(i)] = 0;
      auto it = records_.find(name);
      if (it == records_.end()) {
        out[3] = 0x03;  // NXDOMAIN
      } else if (qtype == 1) {
        auto b = asio::ip::make_address_v4(it->second).to_bytes();
        out.insert(out.end(), {0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4});
        out.insert(out.end(), b.begin(), b.end());
        out[7] = 1;
      }
      socket_.send_to(asio::buffer(out), peer, 0, ec);
    }
  });
}

FakeDns::~FakeDns() {
  stop_ = true;
  std::error_code ec;
  // Wake the blocking receive: a datagram to ourselves.
  udp::socket poke(ctx_, udp::v4());
  poke.send_to(asio::buffer("x", 1), socket_.local_endpoint(), 0, ec);
  thread_.join();
}

std::string FakeDns::address() const {
  return "127.0.0.1:" + std::to_string(socket_.local_endpoint().port());
}

std::string user_line(const std::string& user, const std::string& password) {
  crypt_data data{};
  std::string salt = "$6$e2e" + user + "$";
  return user + ":" + crypt_r(password.c_str(), salt.c_str(), &data) + "\n";
}

}  // namespace konn::socks5::e2e
