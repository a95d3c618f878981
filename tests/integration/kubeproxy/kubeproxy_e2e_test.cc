// End-to-end tests of kubeproxy-http: the built binary in front of the TLS fake apiserver
// (tests/support/kubeproxy_apiserver.cc), driven by real curl and kubectl and by raw sockets for
// bad input.
// Everything binds port 0 on loopback, lives in a temp dir and waits on events with deadlines.
#include <algorithm>
#include <arpa/inet.h>
#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <catch2/catch.hpp>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::string bin(const std::string& name) {
  const char* d = std::getenv("KONN_BIN_DIR");
  return std::string(d ? d : ".") + "/" + name;
}
std::string source(const std::string& rel) {
  // The source tree from the build (not __FILE__: ccache's base_dir makes that relative).
  if (const char* d = std::getenv("KONN_SOURCE_DIR")) return std::string(d) + "/" + rel;
  return std::string(KONN_E2E_SOURCE_DIR) + "/" + rel;
}
std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/kubeproxy-e2e-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A spawned process whose stdout/stderr go to files. Killed (SIGKILL after SIGTERM) on
// destruction.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const fs::path& dir, const std::string& name,
        const std::map<std::string, std::string>& env = {}, bool stdout_pipe = false)
      : out_(dir / (name + ".out")), err_(dir / (name + ".err")) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    int fds[2] = {-1, -1};
    if (stdout_pipe) {
      REQUIRE(pipe(fds) == 0);
      posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
      posix_spawn_file_actions_addclose(&fa, fds[0]);
    } else {
      posix_spawn_file_actions_addopen(&fa, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
    posix_spawn_file_actions_addopen(&fa, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      std::string k = kv.substr(0, kv.find('='));
      if (env.count(k) == 0 && k != "KUBECONFIG" && k != "HTTPS_PROXY" && k != "https_proxy" &&
          k != "HTTP_PROXY" && k != "http_proxy" && k != "NO_PROXY" && k != "no_proxy") {
        env_s.push_back(kv);
      }
    }
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = argv;
    std::vector<char*> cargv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    int rc = posix_spawnp(&pid_, cargv[0], &fa, nullptr, cargv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (stdout_pipe) {
      close(fds[1]);
      pipe_ = fds[0];
    }
    REQUIRE(rc == 0);
  }
  ~Child() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGTERM);
      if (!wait_exit(3s)) {
        kill(pid_, SIGKILL);
        wait_exit(3s);
      }
    }
    if (pipe_ >= 0) close(pipe_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Polls (with a deadline) until the process exits; true when it did.
  bool wait_exit(Clock::duration limit) {
    auto deadline = Clock::now() + limit;
    while (!exited_) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }
  // Waits until stdout contains `needle`; returns stdout then.
  std::string wait_output(const std::string& needle, Clock::duration limit = 10s) {
    auto deadline = Clock::now() + limit;
    for (;;) {
      std::string s = slurp(out_);
      if (s.find(needle) != std::string::npos) return s;
      if (Clock::now() > deadline) {
        FAIL("no \"" << needle << "\" in stdout: " << s << " stderr: " << slurp(err_));
      }
      std::this_thread::sleep_for(10ms);
    }
  }
  // Waits until stderr contains `needle` (log lines are written asynchronously).
  bool wait_err(const std::string& needle, Clock::duration limit = 10s) {
    auto deadline = Clock::now() + limit;
    while (slurp(err_).find(needle) == std::string::npos) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }
  int code() const { return code_; }
  std::string out() const { return slurp(out_); }
  std::string err() const { return slurp(err_); }
  int pipe_fd() const { return pipe_; }

 private:
  fs::path out_, err_;
  pid_t pid_ = -1;
  int pipe_ = -1;
  bool exited_ = false;
  int code_ = -1;
};

struct RunResult {
  int code;
  std::string out;
  std::string err;
};

// Runs a client command to completion (bounded).
RunResult run(const std::vector<std::string>& argv, const fs::path& dir,
              const std::map<std::string, std::string>& env = {}) {
  static int n = 0;
  Child c(argv, dir, "run" + std::to_string(++n), env);
  REQUIRE(c.wait_exit(30s));
  return {c.code(), c.out(), c.err()};
}

uint16_t port_from(const std::string& line) {
  auto pos = line.rfind(':');
  return static_cast<uint16_t>(std::stoi(line.substr(pos + 1)));
}

// A blocking loopback TCP client with deadlines, for requests curl will not send.
class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~RawClient() { close(fd_); }
  bool send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  // Reads until `pred(received)` holds, EOF, or the deadline. Returns what was received.
  template <typename Pred>
  std::string read_until(Pred pred, Clock::duration limit = 10s) {
    auto deadline = Clock::now() + limit;
    while (!pred(data_) && !eof_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[65536];
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        eof_ = true;
        break;
      }
      data_.append(buf, static_cast<size_t>(n));
    }
    return data_;
  }
  std::string read_until_contains(const std::string& s, Clock::duration limit = 10s) {
    return read_until([&](const std::string& d) { return d.find(s) != std::string::npos; }, limit);
  }
  std::string read_to_eof(Clock::duration limit = 10s) {
    return read_until([](const std::string&) { return false; }, limit);
  }
  bool eof() const { return eof_; }
  void clear() { data_.clear(); }

 private:
  int fd_ = -1;
  std::string data_;
  bool eof_ = false;
};

// The fake apiserver (TLS, token "s3cret", client certs from the test CA) and a kubeconfig for it.
struct Fixture {
  TempDir dir;
  std::unique_ptr<Child> apiserver;
  uint16_t api_port = 0;

  explicit Fixture(std::vector<std::string> extra = {}) {
    auto r = run({"bash", source("tests/integration/kubeproxy/gen_certs.sh"), dir.path.string()},
                 dir.path);
    INFO(r.err);
    REQUIRE(r.code == 0);
    std::vector<std::string> argv{bin("kubeproxy-fake-apiserver"),
                                  "--cert",
                                  (dir.path / "server.crt").string(),
                                  "--key",
                                  (dir.path / "server.key").string(),
                                  "--client-ca",
                                  (dir.path / "ca.crt").string(),
                                  "--token",
                                  "s3cret"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    apiserver = std::make_unique<Child>(argv, dir.path, "apiserver");
    api_port = port_from(apiserver->wait_output("listening on"));
    write_kubeconfig("config", "https://127.0.0.1:" + std::to_string(api_port),
                     "    token: s3cret\n");
  }

  // Writes a kubeconfig with relative CA path; `user` is the YAML body of the user entry.
  std::string write_kubeconfig(const std::string& name, const std::string& server,
                               const std::string& user, const std::string& cluster_extra = "") {
    std::ofstream(dir.path / name)
        << "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n"
           "  cluster:\n    server: "
        << server << "\n    certificate-authority: ca.crt\n"
        << cluster_extra << "users:\n- name: u\n  user:\n"
        << user
        << "contexts:\n- name: fake\n  context: {cluster: fake, user: u}\n"
           "current-context: fake\n";
    return (dir.path / name).string();
  }

  std::unique_ptr<Child> start_proxy(std::vector<std::string> args, const std::string& name = "kp",
                                     uint16_t* port = nullptr) {
    std::vector<std::string> argv{bin("kubeproxy-http"), "--port=0", "--health-port=0"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto c = std::make_unique<Child>(argv, dir.path, name);
    uint16_t p = port_from(c->wait_output("Starting to serve on 127.0.0.1:"));
    if (port) *port = p;
    return c;
  }

  std::string kubeconfig() const { return (dir.path / "config").string(); }
  std::string url(uint16_t port, const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port) + path;
  }
};

// A port-forward upgrade through the proxy on `port` to the fixture's konn-echo protocol: 101,
// an echo, then our half-close answered with BYE and EOF.
void check_echo_upgrade(uint16_t port) {
  RawClient c(port);
  c.send(
      "GET /api/v1/namespaces/default/pods/p/portforward HTTP/1.1\r\nHost: localhost\r\n"
      "Connection: Upgrade\r\nUpgrade: konn-echo\r\n\r\n");
  CHECK_THAT(c.read_until_contains("\r\n\r\n"), Catch::StartsWith("HTTP/1.1 101"));
  c.clear();
  c.send("ping");
  CHECK(c.read_until_contains("ping") == "ping");
  c.shutdown_write();
  CHECK(c.read_to_eof() == "pingBYE\n");
}

}  // namespace

TEST_CASE("curl and kubectl get --raw through the forwarder", "[kubeproxy][e2e]") {
  Fixture f;
  uint16_t port = 0;
  auto kp = f.start_proxy({"--kubeconfig=" + f.kubeconfig()}, "kp", &port);
  auto r = run({"curl", "-sS", "-i", f.url(port, "/api/")}, f.dir.path);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 200 OK"));
  CHECK_THAT(r.out, Catch::Contains("\"kind\":\"APIVersions\""));
  // CORS headers from the apiserver are removed, as kubectl proxy does.
  CHECK_THAT(r.out, !Catch::Contains("Access-Control-Allow-Origin"));

  r = run({"kubectl", "--server=" + f.url(port, ""), "get", "--raw", "/api"}, f.dir.path);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("APIVersions"));
  r = run(
      {"kubectl", "--server=" + f.url(port, ""), "get", "--raw", "/api/v1/namespaces/default/pods"},
      f.dir.path);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("\"kind\":\"PodList\"") && Catch::Contains("pod-1"));
}

TEST_CASE("pooled keep-alive upstream connections are reused", "[kubeproxy][e2e]") {
  Fixture f;
  uint16_t port = 0;
  auto kp = f.start_proxy({"--kubeconfig=" + f.kubeconfig(), "--workers=1"}, "kp", &port);
  for (int i = 0; i < 5; ++i) {
    auto r = run({"curl", "-sS", "-f", f.url(port, "/api/v1/namespaces/default/pods")}, f.dir.path);
    REQUIRE(r.code == 0);
  }
  auto r = run({"curl", "-sS", f.url(port, "/stats")}, f.dir.path);
  // Six requests from six curl processes, one TLS connection to the apiserver.
  CHECK(r.out == "{\"connections\":1}");
}

// After a burst, the pool keeps at most Forwarder::kMaxIdleUpstream (25, kubectl proxy's
// transport's limit) idle connections to the apiserver, whatever the burst took; each holds a TLS
// session and its buffers (about 100 KiB of RSS).
TEST_CASE("idle upstream connections after a burst are at most 25", "[kubeproxy][e2e]") {
  // Each watch holds its upstream connection about 0.6 s, so the 40 run side by side.
  Fixture f({"--watch-events", "2", "--watch-interval-ms", "300"});
  uint16_t port = 0;
  auto kp = f.start_proxy({"--kubeconfig=" + f.kubeconfig(), "--workers=1"}, "kp", &port);
  std::vector<std::string> argv{"curl", "-sS", "-f", "-o", "/dev/null", "--parallel",
                                "--parallel-immediate", "--parallel-max", "40"};
  for (int i = 0; i < 40; ++i) {
    argv.push_back(f.url(port, "/api/v1/namespaces/default/pods?watch=1&i=" + std::to_string(i)));
    argv.push_back("-o");
    argv.push_back("/dev/null");
  }
  auto r = run(argv, f.dir.path);
  REQUIRE(r.code == 0);
  auto stats = run({"curl", "-sS", f.url(port, "/stats")}, f.dir.path);
  // The burst needed more connections than the pool keeps (or the check below proves nothing).
  auto opened = std::stoi(stats.out.substr(stats.out.find(':') + 1));
  INFO(stats.out);
  REQUIRE(opened > 25);
  // Connections from the proxy to the apiserver still open (the proxy's side: destination port
  // the apiserver's), once the pool has settled.
  auto api = std::to_string(f.api_port);
  auto count_open = [&] {
    auto ss = run({"ss", "-Htn", "state", "established", "dport", "= :" + api}, f.dir.path);
    return static_cast<int>(std::count(ss.out.begin(), ss.out.end(), '\n'));
  };
  int open = count_open();
  for (int i = 0; i < 40 && open > 25; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    open = count_open();
  }
  CHECK(open <= 25);
  CHECK(open > 0);  // and the pool still keeps some
}

TEST_CASE("watch events arrive one by one", "[kubeproxy][e2e]") {
  Fixture f({"--watch-events", "4", "--watch-interval-ms", "300"});
  uint16_t port = 0;
  auto kp = f.start_proxy({"--kubeconfig=" + f.kubeconfig()}, "kp", &port);
  Child curl({"curl", "-sS", "-N", f.url(port, "/api/v1/namespaces/default/pods?watch=1")},
             f.dir.path, "watch", {}, true);
  std::vector<Clock::time_point> arrivals;
  std::string buf;
  auto deadline = Clock::now() + 15s;
  while (arrivals.size() < 4 && Clock::now() < deadline) {
    pollfd p{curl.pipe_fd(), POLLIN, 0};
    if (poll(&p, 1, 500) <= 0) continue;
    char tmp[4096];
    ssize_t n = read(curl.pipe_fd(), tmp, sizeof tmp);
    if (n <= 0) break;
    buf.append(tmp, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      CHECK_THAT(buf.substr(0, nl), Catch::Contains("\"type\":\"ADDED\""));
      buf.erase(0, nl + 1);
      arrivals.push_back(Clock::now());
    }
  }
  REQUIRE(arrivals.size() == 4);
  // Emitted 300 ms apart: buffered-to-the-end delivery would bunch them together.
  for (size_t i = 1; i < arrivals.size(); ++i) {
    CHECK(arrivals[i] - arrivals[i - 1] > 150ms);
  }
  CHECK(curl.wait_exit(10s));
}

TEST_CASE("upgrade round trip with half-close", "[kubeproxy][e2e]") {
  Fixture f;
  uint16_t port = 0;
  auto kp = f.start_proxy({"--kubeconfig=" + f.kubeconfig()}, "kp", &port);
  RawClient c(port);
  REQUIRE(
      c.send("POST /api/v1/namespaces/default/pods/p/portforward HTTP/1.1\r\n"
             "Host: localhost:" +
             std::to_string(port) +
             "\r\n"
             "Connection: Upgrade\r\nUpgrade: konn-echo\r\n\r\nearly-"));
  std::string got = c.read_until_contains("early-");
  CHECK_THAT(got, Catch::StartsWith("HTTP/1.1 101 Switching Protocols"));
  REQUIRE(c.send("hello"));
  got = c.read_until_contains("early-hello");
  CHECK_THAT(got, Catch::EndsWith("early-hello"));
  c.shutdown_write();  // half-close: the apiserver answers after our EOF
  got = c.read_to_eof();
  CHECK(c.eof());
  CHECK_THAT(got, Catch::EndsWith("early-helloBYE\n"));
}

// reliability: kubeproxy-http | exec or attach path, Host outside --accept-hosts, DELETE with
// reliability+: --reject-methods | `HTTP/1.1 403 Forbidden` "Forbidden" | debug "filter rejecting
// reliability+: ..." | kubeproxy-http
TEST_CASE("filters answer 403 Forbidden like kubectl", "[kubeproxy][e2e]") {
  Fixture f;
  uint16_t port = 0;
  auto kp =
      f.start_proxy({"--kubeconfig=" + f.kubeconfig(), "--reject-methods=^DELETE$"}, "kp", &port);
  auto r = run({"curl", "-sS", "-i", "-X", "POST",
                f.url(port, "/api/v1/namespaces/default/pods/p/exec?command=ls")},
               f.dir.path);
  CHECK_THAT(r.out,
             Catch::StartsWith("HTTP/1.1 403 Forbidden") && Catch::EndsWith("\r\n\r\nForbidden\n"));
  r = run({"curl", "-sS", "-i", "-H", "Host: evil.example.com", f.url(port, "/api/")}, f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 403 Forbidden"));
  r = run({"curl", "-sS", "-i", "-X", "DELETE", f.url(port, "/api/v1/namespaces/default/pods/p")},
          f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 403 Forbidden"));
  r = run({"curl", "-sS", "-i", f.url(port, "/api/v1/namespaces/default/pods/p/attach")},
          f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 403 Forbidden"));
}

// reliability: kubeproxy-http | apiserver down (nothing listens) | `HTTP/1.1 502 Bad Gateway` with
// reliability+: "connection refused" and the port | warn "...: GET /api/: ..." | kubeproxy-http
TEST_CASE("upstream down gives 502 with the reason", "[kubeproxy][e2e]") {
  Fixture f;
  // A port that was just free: nothing listens there.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  uint16_t dead = ntohs(a.sin_port);
  close(s);
  auto cfg = f.write_kubeconfig("down", "https://127.0.0.1:" + std::to_string(dead),
                                "    token: s3cret\n");
  uint16_t port = 0;
  auto kp = f.start_proxy({"--kubeconfig=" + cfg}, "kp", &port);
  auto r = run({"curl", "-sS", "-i", f.url(port, "/api/")}, f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 502 Bad Gateway"));
  CHECK_THAT(r.out, Catch::Contains("connection refused") && Catch::Contains(std::to_string(dead)));
}

// reliability: kubeproxy-http | Content-Length with Transfer-Encoding (a smuggled request behind),
// reliability+: either order, or TE `chunked, identity` | `HTTP/1.1 400 Bad Request`, closed,
// reliability+: nothing smuggled | info "...: rejected request (400): ..." | kubeproxy-http
TEST_CASE("bad input: 431, slowloris, smuggling", "[kubeproxy][e2e]") {
  Fixture f;
  uint16_t port = 0;
  auto kp = f.start_proxy({"--kubeconfig=" + f.kubeconfig(), "--max-header-bytes=8192",
                           "--request-header-timeout=600ms"},
                          "kp", &port);
  // reliability: kubeproxy-http | 20 kB header over --max-header-bytes | `HTTP/1.1 431 Request
  // reliability+: Header Fields Too Large`, closed | info "...: rejected request (431): ..." |
  // reliability+: kubeproxy-http
  SECTION("over-long header") {
    RawClient c(port);
    c.send("GET /api/ HTTP/1.1\r\nHost: localhost\r\nX-Big: " + std::string(20000, 'a') +
           "\r\n\r\n");
    auto got = c.read_to_eof();
    CHECK_THAT(got, Catch::StartsWith("HTTP/1.1 431 Request Header Fields Too Large"));
    CHECK(c.eof());
  }
  // reliability: kubeproxy-http | header trickled a byte per 100 ms (slowloris) | `HTTP/1.1 408`,
  // reliability+: closed within 3 s | debug "...: request head not complete in time, closed" |
  // reliability+: kubeproxy-http
  SECTION("slowloris gets 408 and is closed") {
    RawClient c(port);
    auto start = Clock::now();
    c.send("GET /api/ HTTP/1.1\r\nHost: localhost\r\n");
    // Trickle one header byte every 100 ms; the whole head never arrives in time.
    std::string got;
    for (int i = 0; i < 40 && !c.eof(); ++i) {
      c.send("X");
      got = c.read_until([](const std::string& d) { return !d.empty(); }, 100ms);
      if (!got.empty()) break;
    }
    got = c.read_to_eof(5s);
    CHECK_THAT(got, Catch::StartsWith("HTTP/1.1 408"));
    CHECK(c.eof());
    CHECK(Clock::now() - start < 3s);
  }
  SECTION("Content-Length with Transfer-Encoding") {
    RawClient c(port);
    c.send(
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\n"
        "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n");
    auto got = c.read_to_eof();
    CHECK_THAT(got, Catch::StartsWith("HTTP/1.1 400 Bad Request"));
    CHECK(got.find("smuggled") == std::string::npos);
  }
  SECTION("Transfer-Encoding with Content-Length") {
    RawClient c(port);
    c.send(
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n"
        "Content-Length: 4\r\n\r\n0\r\n\r\n");
    CHECK_THAT(c.read_to_eof(), Catch::StartsWith("HTTP/1.1 400 Bad Request"));
  }
  SECTION("obfuscated Transfer-Encoding") {
    RawClient c(port);
    c.send(
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked, identity\r\n\r\n");
    CHECK_THAT(c.read_to_eof(), Catch::StartsWith("HTTP/1.1 400 Bad Request"));
  }
}

TEST_CASE("request bodies are streamed, Content-Length and chunked", "[kubeproxy][e2e]") {
  Fixture f;
  uint16_t port = 0;
  auto kp = f.start_proxy({"--kubeconfig=" + f.kubeconfig()}, "kp", &port);
  std::string body(3 * 1024 * 1024 + 7, 'b');
  std::ofstream(f.dir.path / "body.bin", std::ios::binary) << body;
  auto r = run({"curl", "-sS", "-f", "--data-binary", "@" + (f.dir.path / "body.bin").string(),
                "-o", (f.dir.path / "echo1").string(), f.url(port, "/echo")},
               f.dir.path);
  CHECK(r.code == 0);
  CHECK(slurp(f.dir.path / "echo1") == body);
  r = run({"curl", "-sS", "-f", "-H", "Transfer-Encoding: chunked", "--data-binary",
           "@" + (f.dir.path / "body.bin").string(), "-o", (f.dir.path / "echo2").string(),
           f.url(port, "/echo")},
          f.dir.path);
  CHECK(r.code == 0);
  CHECK(slurp(f.dir.path / "echo2") == body);
}

TEST_CASE("credentials: client certificate, impersonation, caller headers", "[kubeproxy][e2e]") {
  Fixture f;
  auto cfg = f.write_kubeconfig("certs", "https://127.0.0.1:" + std::to_string(f.api_port),
                                "    client-certificate: client.crt\n"
                                "    client-key: client.key\n");
  uint16_t port = 0;
  auto kp = f.start_proxy({"--kubeconfig=" + cfg, "--as=jane", "--as-group=devs"}, "kp", &port);
  auto r = run({"curl", "-sS", "-i", f.url(port, "/headers")}, f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 200 OK"));
  CHECK_THAT(r.out, Catch::Contains("\"Impersonate-User\":[\"jane\"]") &&
                        Catch::Contains("\"Impersonate-Group\":[\"devs\"]") &&
                        Catch::Contains("\"Host\":[\"127.0.0.1:" + std::to_string(f.api_port)));
  // A wrong token from the caller passes through (kubectl behaviour) and the apiserver says 401.
  r = run({"curl", "-sS", "-i", "-H", "Authorization: Bearer wrong", f.url(port, "/api/")},
          f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 200 OK"));  // client cert still authenticates

  auto tok_cfg = f.write_kubeconfig("tok", "https://127.0.0.1:" + std::to_string(f.api_port),
                                    "    token: s3cret\n");
  uint16_t port2 = 0;
  auto kp2 =
      f.start_proxy({"--kubeconfig=" + tok_cfg, "--strip-client-credentials"}, "kp2", &port2);
  r = run({"curl", "-sS", "-i", "-H", "Authorization: Bearer wrong", f.url(port2, "/api/")},
          f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 200 OK"));
  uint16_t port3 = 0;
  auto kp3 = f.start_proxy({"--kubeconfig=" + tok_cfg}, "kp3", &port3);
  r = run({"curl", "-sS", "-i", "-H", "Authorization: Bearer wrong", f.url(port3, "/api/")},
          f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 401"));
}

// reliability: kubeproxy-http | missing kubeconfig, kubeconfig naming a missing CA file, or an
// reliability+: unknown flag | exit 1 naming the file and field
// reliability+: (clusters["c"].cluster.certificate-authority); exit 2 for the flag (a usage
// reliability+: error) | on stderr | nothing: it does not start
TEST_CASE("kubeconfig missing or invalid: error names file and field, exit 1", "[kubeproxy][e2e]") {
  TempDir d;
  auto r = run({bin("kubeproxy-http"), "--port=0", "--kubeconfig=" + (d.path / "nope").string()},
               d.path);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains((d.path / "nope").string()) && Catch::Contains("No such file"));
  std::ofstream(d.path / "bad") << "clusters:\n- name: c\n  cluster:\n    server: https://h:1\n"
                                   "    certificate-authority: missing-ca.crt\n"
                                   "contexts:\n- {name: x, context: {cluster: c}}\n"
                                   "current-context: x\n";
  r = run({bin("kubeproxy-http"), "--port=0", "--kubeconfig=" + (d.path / "bad").string()}, d.path);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("clusters[\"c\"].cluster.certificate-authority") &&
                        Catch::Contains((d.path / "bad").string()));
  r = run({bin("kubeproxy-http"), "--port=0", "--bogus-flag"}, d.path);
  CHECK(r.code == 2);
  CHECK(r.err == "kubeproxy-http: unknown flag --bogus-flag\n");
}

TEST_CASE("CONNECT mode for kubectl and curl", "[kubeproxy][e2e]") {
  Fixture f;
  uint16_t cport = 0;
  auto cp = f.start_proxy({"--mode=connect", "--access-log"}, "connect", &cport);
  std::string proxy = "http://127.0.0.1:" + std::to_string(cport);
  auto cfg = f.write_kubeconfig("via-proxy", "https://127.0.0.1:" + std::to_string(f.api_port),
                                "    token: s3cret\n", "    proxy-url: " + proxy + "\n");
  auto r = run({"kubectl", "--kubeconfig=" + cfg, "get", "--raw", "/api"}, f.dir.path,
               {{"HTTPS_PROXY", proxy}});
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("APIVersions"));
  CHECK(cp->wait_err("CONNECT 127.0.0.1:" + std::to_string(f.api_port)));

  std::string api = "https://127.0.0.1:" + std::to_string(f.api_port) + "/api";
  r = run({"curl", "-sS", "-p", "-x", proxy, "--cacert", (f.dir.path / "ca.crt").string(), "-H",
           "Authorization: Bearer s3cret", api},
          f.dir.path);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("APIVersions"));

  RawClient c(cport);
  c.send("CONNECT 127.0.0.1:" + std::to_string(f.api_port) + " HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(c.read_until_contains("\r\n\r\n") == "HTTP/1.1 200 Connection established\r\n\r\n");
}

// reliability: kubeproxy-http | CONNECT without Proxy-Authorization (--proxy-user set) | `HTTP/1.1
// reliability+: 407` with Proxy-Authenticate: Basic | access log line only with --access-log | curl
// reliability+: with credentials connects after
// reliability: kubeproxy-http | CONNECT outside --allowed-destinations | `HTTP/1.1 403 Forbidden` |
// reliability+: info "...: CONNECT 10.1.2.3:443 refused: not in --allowed-destinations" | curl with
// reliability+: credentials connects after
// reliability: kubeproxy-http | CONNECT to a closed port | `HTTP/1.1 502 Bad Gateway` "connection
// reliability+: refused" | info "...: CONNECT 127.0.0.1:1: ..." | curl with credentials connects
// reliability+: after
TEST_CASE("CONNECT mode refusals: 403, 407, 502", "[kubeproxy][e2e]") {
  Fixture f;
  uint16_t cport = 0;
  auto cp = f.start_proxy({"--mode=connect",
                           "--allowed-destinations=^127\\.0\\.0\\.1:" + std::to_string(f.api_port) +
                               "$,^127\\.0\\.0\\.1:1$",
                           "--proxy-user=kp:pw"},
                          "connect", &cport);
  std::string target = "127.0.0.1:" + std::to_string(f.api_port);
  {
    RawClient c(cport);
    c.send("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n");
    auto got = c.read_to_eof();
    CHECK_THAT(got, Catch::StartsWith("HTTP/1.1 407 Proxy Authentication Required") &&
                        Catch::Contains("Proxy-Authenticate: Basic realm="));
  }
  {
    RawClient c(cport);
    c.send("CONNECT 10.1.2.3:443 HTTP/1.1\r\nProxy-Authorization: Basic a3A6cHc=\r\n\r\n");
    CHECK_THAT(c.read_to_eof(), Catch::StartsWith("HTTP/1.1 403 Forbidden"));
  }
  {
    RawClient c(cport);
    c.send("CONNECT 127.0.0.1:1 HTTP/1.1\r\nProxy-Authorization: Basic a3A6cHc=\r\n\r\n");
    auto got = c.read_to_eof();
    CHECK_THAT(got, Catch::StartsWith("HTTP/1.1 502 Bad Gateway") &&
                        Catch::Contains("connection refused"));
  }
  auto r = run({"curl", "-sS", "-p", "-x", "http://kp:pw@127.0.0.1:" + std::to_string(cport),
                "--cacert", (f.dir.path / "ca.crt").string(), "-H", "Authorization: Bearer s3cret",
                "https://" + target + "/api"},
               f.dir.path);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("APIVersions"));
}

TEST_CASE("CONNECT mode: a half-closed tunnel whose destination ignores the FIN ends at "
          "--half-close-timeout",
          "[kubeproxy][e2e]") {
  Fixture f;
  // A destination that reads until EOF and then neither writes nor closes.
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(lfd, 4) == 0);
  socklen_t len = sizeof a;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  int peer = -1;
  std::thread dest([&] {
    peer = accept(lfd, nullptr, nullptr);
    char buf[4096];
    while (peer >= 0 && recv(peer, buf, sizeof buf, 0) > 0) {
    }
  });
  uint16_t cport = 0;
  auto cp = f.start_proxy({"--mode=connect", "--half-close-timeout=500ms"}, "connect", &cport);
  std::string target = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  RawClient c(cport);
  c.send("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n");
  CHECK_THAT(c.read_until_contains("\r\n\r\n"),
             Catch::StartsWith("HTTP/1.1 200 Connection established"));
  c.send("request");
  c.shutdown_write();  // passed on; the destination ignores it
  auto t0 = Clock::now();
  c.read_to_eof(5s);
  auto took = Clock::now() - t0;
  CHECK(c.eof());
  CHECK(took >= 400ms);
  CHECK(took < 3s);
  CHECK(cp->wait_err("--half-close-timeout"));
  dest.join();
  if (peer >= 0) close(peer);
  close(lfd);
}

TEST_CASE("forwarder honours proxy-url, for upgrades too", "[kubeproxy][e2e]") {
  Fixture f;
  uint16_t cport = 0;
  auto cp = f.start_proxy({"--mode=connect", "--access-log"}, "connect", &cport);
  auto cfg = f.write_kubeconfig("via-proxy", "https://127.0.0.1:" + std::to_string(f.api_port),
                                "    token: s3cret\n",
                                "    proxy-url: http://127.0.0.1:" + std::to_string(cport) + "\n");
  uint16_t port = 0;
  auto kp = f.start_proxy({"--kubeconfig=" + cfg}, "kp", &port);
  auto r = run({"curl", "-sS", "-f", f.url(port, "/api/")}, f.dir.path);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("APIVersions"));
  check_echo_upgrade(port);
  CHECK(cp->wait_err("CONNECT 127.0.0.1:" + std::to_string(f.api_port)));
}

TEST_CASE("unix socket, api prefix and static files", "[kubeproxy][e2e]") {
  Fixture f;
  fs::create_directories(f.dir.path / "www");
  std::ofstream(f.dir.path / "www" / "index.html") << "<h1>hello</h1>\n";
  std::string sock = (f.dir.path / "kp.sock").string();
  Child kp({bin("kubeproxy-http"), "--kubeconfig=" + f.kubeconfig(), "-u", sock, "--health-port=0",
            "--api-prefix=/custom/", "-w", (f.dir.path / "www").string(), "-P", "/static/"},
           f.dir.path, "kp");
  CHECK_THAT(kp.wait_output("Starting to serve on"),
             Catch::StartsWith("Starting to serve on " + sock));
  CHECK((fs::status(sock).permissions() & (fs::perms::group_all | fs::perms::others_all)) ==
        fs::perms::none);
  auto r =
      run({"curl", "-sS", "-i", "--unix-socket", sock, "http://localhost/custom/api/"}, f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 200 OK") && Catch::Contains("APIVersions"));
  r = run({"curl", "-sS", "-i", "--unix-socket", sock, "http://localhost/api/"}, f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 404 Not Found"));
  r = run({"curl", "-sS", "-i", "--unix-socket", sock, "http://localhost/static/index.html"},
          f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 200 OK") && Catch::EndsWith("<h1>hello</h1>\n"));
  r = run({"curl", "-sS", "-i", "--unix-socket", sock, "http://localhost/static/../config"},
          f.dir.path);
  CHECK_THAT(r.out, !Catch::Contains("s3cret"));
  // File names are decoded; an encoded "..", '/' or NUL reaches nothing outside --www.
  std::ofstream(f.dir.path / "www" / "a b.txt") << "spaced\n";
  r = run({"curl", "-sS", "-i", "--unix-socket", sock, "http://localhost/static/a%20b.txt"},
          f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 200 OK") && Catch::EndsWith("spaced\n"));
  for (const char* t : {"/static/%2E%2E/config", "/static/..%2Fconfig", "/static/%2e%2e%2fconfig",
                        "/static/index.html%00.png"}) {
    r = run({"curl", "-sS", "-i", "--path-as-is", "--unix-socket", sock,
             std::string("http://localhost") + t},
            f.dir.path);
    INFO(t);
    CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 404 Not Found") && !Catch::Contains("s3cret"));
  }
}

// reliability: kubeproxy-http | request without the --require-token token | `HTTP/1.1 401
// reliability+: Unauthorized` | access log line (--access-log) | the request with the token is
// reliability+: served
TEST_CASE("hardened listener: TLS and a required caller token", "[kubeproxy][e2e]") {
  Fixture f;
  uint16_t port = 0;
  auto kp = f.start_proxy(
      {"--kubeconfig=" + f.kubeconfig(), "--tls-cert-file=" + (f.dir.path / "server.crt").string(),
       "--tls-private-key-file=" + (f.dir.path / "server.key").string(),
       "--require-token=caller-token", "--access-log"},
      "kp", &port);
  std::string url = "https://127.0.0.1:" + std::to_string(port) + "/headers";
  std::string ca = (f.dir.path / "ca.crt").string();
  auto r = run({"curl", "-sS", "-i", "--cacert", ca, url}, f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 401 Unauthorized"));
  r = run({"curl", "-sS", "-i", "--cacert", ca, "-H", "Authorization: Bearer caller-token", url},
          f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 200 OK"));
  // The caller's token is replaced by the kubeconfig's.
  CHECK_THAT(r.out, Catch::Contains("\"Authorization\":[\"Bearer s3cret\"]"));
  CHECK(kp->wait_err("\"GET /headers\" 200"));
}

namespace {

// A client certificate for `cn` signed by the fixture's CA (gen_certs.sh made only alice's).
void make_client_cert(const fs::path& dir, const std::string& cn) {
  auto r = run({"sh", "-c",
                "cd " + dir.string() + " && openssl req -newkey rsa:2048 -nodes -keyout " + cn +
                    ".key -out " + cn + ".csr -subj /CN=" + cn +
                    " && printf 'extendedKeyUsage=clientAuth\\n' > " + cn +
                    ".ext && openssl x509 -req -in " + cn + ".csr -CA ca.crt -CAkey ca.key " +
                    "-CAcreateserial -out " + cn + ".crt -days 2 -extfile " + cn + ".ext"},
               dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
}

// `text` as a JSON string literal (PEM has newlines).
std::string json_quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += std::string("\\") + c;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Writes an executable exec plugin `name` (a shell script body) into the fixture's directory and
// returns the kubeconfig user entry that runs it.
std::string exec_user(const fs::path& dir, const std::string& name, const std::string& script,
                      const std::string& api_version = "client.authentication.k8s.io/v1") {
  std::ofstream(dir / name) << "#!/bin/sh\ncd " << dir.string() << "\n" << script;
  fs::permissions(dir / name, fs::perms::owner_all);
  return "    exec:\n      apiVersion: " + api_version + "\n      command: ./" + name + "\n";
}

size_t count_lines(const fs::path& p) {
  std::string s = slurp(p);
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

}  // namespace

TEST_CASE("https proxy-url: TLS to the proxy, TLS to the apiserver inside it", "[kubeproxy][e2e]") {
  Fixture f;
  // kubeproxy-http's CONNECT mode with a TLS listener is the https proxy.
  uint16_t cport = 0;
  auto cp = f.start_proxy(
      {"--mode=connect", "--access-log", "--tls-cert-file=" + (f.dir.path / "server.crt").string(),
       "--tls-private-key-file=" + (f.dir.path / "server.key").string()},
      "connect", &cport);
  auto cfg = f.write_kubeconfig(
      "via-https-proxy", "https://127.0.0.1:" + std::to_string(f.api_port), "    token: s3cret\n",
      "    proxy-url: https://127.0.0.1:" + std::to_string(cport) + "\n");
  uint16_t port = 0;
  auto kp = f.start_proxy({"--kubeconfig=" + cfg, "--workers=1"}, "kp", &port);
  auto r = run({"curl", "-sS", "-f", f.url(port, "/api/")}, f.dir.path);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("APIVersions"));
  // A large body through both TLS layers, on the pooled connection.
  r = run({"curl", "-sS", "-f", "-o", (f.dir.path / "big").string(),
           f.url(port, "/download?bytes=5000000")},
          f.dir.path);
  CHECK(r.code == 0);
  CHECK(fs::file_size(f.dir.path / "big") == 5000000);
  r = run({"curl", "-sS", f.url(port, "/stats")}, f.dir.path);
  CHECK(r.out == "{\"connections\":1}");
  // An upgrade with half-close through the double TLS.
  check_echo_upgrade(port);
  CHECK(cp->wait_err("CONNECT 127.0.0.1:" + std::to_string(f.api_port)));

  // The proxy's certificate is checked with the kubeconfig's CA: one it did not sign fails.
  auto gen = run({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                  (f.dir.path / "other.key").string(), "-out", (f.dir.path / "other.crt").string(),
                  "-days", "1", "-subj", "/CN=other", "-addext", "subjectAltName=IP:127.0.0.1"},
                 f.dir.path);
  REQUIRE(gen.code == 0);
  uint16_t cport2 = 0;
  auto cp2 =
      f.start_proxy({"--mode=connect", "--tls-cert-file=" + (f.dir.path / "other.crt").string(),
                     "--tls-private-key-file=" + (f.dir.path / "other.key").string()},
                    "connect2", &cport2);
  auto bad = f.write_kubeconfig(
      "untrusted-proxy", "https://127.0.0.1:" + std::to_string(f.api_port), "    token: s3cret\n",
      "    proxy-url: https://127.0.0.1:" + std::to_string(cport2) + "\n");
  uint16_t port2 = 0;
  auto kp2 = f.start_proxy({"--kubeconfig=" + bad}, "kp2", &port2);
  r = run({"curl", "-sS", "-i", f.url(port2, "/api/")}, f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 502") && Catch::Contains("proxyconnect tcp") &&
                        Catch::Contains("x509"));
}

TEST_CASE("socks5 proxy-url, without and with username and password", "[kubeproxy][e2e]") {
  Fixture f;
  auto hash = run({"openssl", "passwd", "-6", "pw"}, f.dir.path);
  REQUIRE(hash.code == 0);
  std::ofstream(f.dir.path / "socks-users") << "kp:" << hash.out;
  auto start_socks = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> argv{bin("socks5"), "--bind-address=127.0.0.1", "--port=0",
                                  "--health-port=-1", "--workers=1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = std::make_unique<Child>(argv, f.dir.path, name);
    REQUIRE(c->wait_err("listening on 127.0.0.1:"));
    std::string err = c->err();
    auto at = err.find("listening on 127.0.0.1:") + std::string("listening on 127.0.0.1:").size();
    return std::make_pair(std::move(c), static_cast<uint16_t>(std::stoi(err.substr(at))));
  };
  auto [open_socks, open_port] = start_socks("socks-open", {});
  auto [auth_socks, auth_port] =
      start_socks("socks-auth", {"--users-file=" + (f.dir.path / "socks-users").string()});
  std::string api = "https://127.0.0.1:" + std::to_string(f.api_port);
  struct Case {
    std::string proxy_url;
    bool ok;
    std::string error;
  };
  std::vector<Case> cases{
      {"socks5://127.0.0.1:" + std::to_string(open_port), true, ""},
      {"socks5://kp:pw@127.0.0.1:" + std::to_string(auth_port), true, ""},
      {"socks5://kp:wrong@127.0.0.1:" + std::to_string(auth_port), false,
       "username/password authentication failed"},
      {"socks5://127.0.0.1:" + std::to_string(auth_port), false, "bad greeting reply"},
  };
  int n = 0;
  for (const auto& c : cases) {
    INFO(c.proxy_url);
    std::string name = "socks" + std::to_string(++n);
    auto cfg = f.write_kubeconfig(name, api, "    token: s3cret\n",
                                  "    proxy-url: " + c.proxy_url + "\n");
    uint16_t port = 0;
    auto kp = f.start_proxy({"--kubeconfig=" + cfg}, "kp-" + name, &port);
    auto r = run({"curl", "-sS", "-i", f.url(port, "/api/")}, f.dir.path);
    if (c.ok) {
      CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 200 OK") && Catch::Contains("APIVersions"));
      // An upgrade through the SOCKS tunnel as well.
      RawClient rc(port);
      rc.send(
          "GET /api/v1/namespaces/default/pods/p/portforward HTTP/1.1\r\nHost: localhost\r\n"
          "Connection: Upgrade\r\nUpgrade: konn-echo\r\n\r\nhi");
      CHECK_THAT(rc.read_until_contains("hi"), Catch::StartsWith("HTTP/1.1 101"));
    } else {
      CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 502") && Catch::Contains(c.error));
    }
  }
  CHECK(auth_socks->wait_err("user=kp"));
}

TEST_CASE("exec plugin that hangs: 502 after the timeout, one run, others not stalled",
          "[kubeproxy][e2e]") {
  Fixture f;
  auto cfg =
      f.write_kubeconfig("hang", "https://127.0.0.1:" + std::to_string(f.api_port),
                         exec_user(f.dir.path, "hang.sh", "echo run >> hang-count\nsleep 30\n"));
  uint16_t port = 0;
  // One I/O thread: a plugin run on it would stall every other request.
  auto kp = f.start_proxy({"--kubeconfig=" + cfg, "--workers=1", "--exec-plugin-timeout=2s"}, "kp",
                          &port);
  auto start = Clock::now();
  Child a({"curl", "-sS", "-i", f.url(port, "/api/")}, f.dir.path, "curl-a");
  Child b({"curl", "-sS", "-i", f.url(port, "/apis")}, f.dir.path, "curl-b");
  std::this_thread::sleep_for(300ms);
  // Meanwhile: a request with its own credentials goes through, a filtered one is answered.
  auto t0 = Clock::now();
  auto r = run({"curl", "-sS", "-i", "-H", "Authorization: Bearer s3cret", f.url(port, "/api/")},
               f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 200 OK"));
  r = run({"curl", "-sS", "-i", f.url(port, "/api/v1/namespaces/default/pods/p/exec")}, f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 403"));
  CHECK(Clock::now() - t0 < 1500ms);
  REQUIRE(a.wait_exit(10s));
  REQUIRE(b.wait_exit(10s));
  CHECK(Clock::now() - start >= 1900ms);
  for (Child* c : {&a, &b}) {
    CHECK_THAT(c->out(), Catch::StartsWith("HTTP/1.1 502 Bad Gateway") &&
                             Catch::Contains("getting credentials: exec: executable") &&
                             Catch::Contains("hang.sh did not finish within 2000ms"));
  }
  CHECK(count_lines(f.dir.path / "hang-count") == 1);  // both waited for the same run
  CHECK(kp->wait_err("getting credentials"));
}

TEST_CASE("exec plugin failure: 502 naming the plugin and its stderr, run again next time",
          "[kubeproxy][e2e]") {
  Fixture f;
  auto cfg = f.write_kubeconfig(
      "fail", "https://127.0.0.1:" + std::to_string(f.api_port),
      exec_user(f.dir.path, "fail.sh",
                "echo run >> fail-count\necho 'error: no credentials for you' >&2\nexit 1\n"));
  uint16_t port = 0;
  auto kp = f.start_proxy({"--kubeconfig=" + cfg}, "kp", &port);
  for (int i = 0; i < 2; ++i) {
    auto r = run({"curl", "-sS", "-i", f.url(port, "/headers")}, f.dir.path);
    CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 502 Bad Gateway") &&
                          Catch::Contains("fail.sh failed with exit code 1") &&
                          Catch::Contains("no credentials for you"));
    // Never forwarded without the credential.
    CHECK_THAT(r.out, !Catch::Contains("\"Host\""));
  }
  CHECK(count_lines(f.dir.path / "fail-count") == 2);
  CHECK(kp->wait_err("fail.sh failed with exit code 1"));
}

TEST_CASE("exec plugin client certificate is used, a new one is not served by old connections",
          "[kubeproxy][e2e]") {
  Fixture f;
  make_client_cert(f.dir.path, "bob");
  // Run 1 answers alice's certificate, run 2 bob's, each expiring two seconds later (v1beta1).
  for (const std::string who : {"client", "bob"}) {
    std::ofstream(f.dir.path / (who + ".json"))
        << "{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\","
           "\"status\":{\"clientCertificateData\":"
        << json_quote(slurp(f.dir.path / (who + ".crt")))
        << ",\"clientKeyData\":" << json_quote(slurp(f.dir.path / (who + ".key")))
        << ",\"expirationTimestamp\":\"EXP\"}}\n";
  }
  auto cfg = f.write_kubeconfig(
      "certs", "https://127.0.0.1:" + std::to_string(f.api_port),
      exec_user(f.dir.path, "cert.sh",
                "printf '%s\\n' \"$KUBERNETES_EXEC_INFO\" >> cert-runs\n"
                "exp=$(date -u -d \"@$(( $(date +%s) + 2 ))\" +%Y-%m-%dT%H:%M:%SZ)\n"
                "if [ $(wc -l < cert-runs) -eq 1 ]; then who=client; else who=bob; fi\n"
                "sed \"s/EXP/$exp/\" $who.json\n",
                "client.authentication.k8s.io/v1beta1"));
  uint16_t port = 0;
  auto kp = f.start_proxy({"--kubeconfig=" + cfg, "--workers=1"}, "kp", &port);
  auto r = run({"curl", "-sS", "-f", f.url(port, "/whoami")}, f.dir.path);
  CHECK(r.out == "{\"cn\":\"alice\"}");
  r = run({"curl", "-sS", "-f", f.url(port, "/whoami")}, f.dir.path);
  CHECK(r.out == "{\"cn\":\"alice\"}");  // cached, same pooled connection
  CHECK(count_lines(f.dir.path / "cert-runs") == 1);
  std::this_thread::sleep_for(2500ms);
  r = run({"curl", "-sS", "-f", f.url(port, "/whoami")}, f.dir.path);
  CHECK(r.out == "{\"cn\":\"bob\"}");  // re-run after expiry; alice's pooled connection unused
  CHECK(count_lines(f.dir.path / "cert-runs") == 2);
  CHECK_THAT(slurp(f.dir.path / "cert-runs"),
             Catch::Contains("\"apiVersion\":\"client.authentication.k8s.io/v1beta1\""));
  r = run({"curl", "-sS", f.url(port, "/stats")}, f.dir.path);
  CHECK(r.out == "{\"connections\":2}");
}

TEST_CASE("exec plugin token expiry: past expiry re-runs every time, future is cached",
          "[kubeproxy][e2e]") {
  Fixture f;
  auto past = f.write_kubeconfig(
      "past", "https://127.0.0.1:" + std::to_string(f.api_port),
      exec_user(f.dir.path, "past.sh",
                "echo run >> past-count\n"
                "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":"
                "\"ExecCredential\",\"status\":{\"token\":\"s3cret\",\"expirationTimestamp\":"
                "\"2001-01-01T00:00:00Z\"}}'\n"));
  auto soon = f.write_kubeconfig(
      "soon", "https://127.0.0.1:" + std::to_string(f.api_port),
      exec_user(f.dir.path, "soon.sh",
                "echo run >> soon-count\n"
                "exp=$(date -u -d \"@$(( $(date +%s) + 2 ))\" +%Y-%m-%dT%H:%M:%SZ)\n"
                "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":"
                "\"ExecCredential\",\"status\":{\"token\":\"s3cret\",\"expirationTimestamp\":\"'"
                "$exp'\"}}'\n"));
  uint16_t p1 = 0;
  uint16_t p2 = 0;
  auto kp1 = f.start_proxy({"--kubeconfig=" + past}, "kp1", &p1);
  auto kp2 = f.start_proxy({"--kubeconfig=" + soon}, "kp2", &p2);
  for (int i = 0; i < 3; ++i) {
    auto r = run({"curl", "-sS", "-i", f.url(p1, "/headers")}, f.dir.path);
    CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 200") &&
                          Catch::Contains("\"Authorization\":[\"Bearer s3cret\"]"));
    r = run({"curl", "-sS", "-i", f.url(p2, "/headers")}, f.dir.path);
    CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 200"));
  }
  CHECK(count_lines(f.dir.path / "past-count") == 3);
  CHECK(count_lines(f.dir.path / "soon-count") == 1);
  std::this_thread::sleep_for(2500ms);
  auto r = run({"curl", "-sS", "-i", f.url(p2, "/headers")}, f.dir.path);
  CHECK_THAT(r.out, Catch::StartsWith("HTTP/1.1 200"));
  CHECK(count_lines(f.dir.path / "soon-count") == 2);
}
