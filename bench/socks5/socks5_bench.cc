// socks5_bench: load generator for bench/socks5/run.sh. Runs its own sink/echo server on
// 127.0.0.1:0 and drives it either directly or through a SOCKS5 proxy (method 00, CONNECT).
//
//   socks5_bench bulk  [--proxy=HOST:PORT] [--mib=N]         → "bulk_mib_s=<MiB/s>"
//   socks5_bench cps   [--proxy=HOST:PORT] [--seconds=S] [--threads=T] → "cps=<conn/s>"
//   socks5_bench idle  [--proxy=HOST:PORT] [--conns=N]       → prints "ready" once N sessions
//                                                               are established, holds them
//                                                               until stdin closes
// Blocking sockets and threads: simple, and the proxy under test is what we measure.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Args {
  std::string mode;
  std::string proxy;  // "" = direct
  long mib = 1024;
  double seconds = 3;
  int threads = 2;
  int conns = 1000;
};

Args parse(int argc, char** argv) {
  Args a;
  if (argc > 1) a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    auto val = [&](const char* k) -> const char* {
      size_t n = std::strlen(k);
      return s.compare(0, n, k) == 0 ? s.c_str() + n : nullptr;
    };
    if (auto v = val("--proxy=")) a.proxy = v;
    if (auto v = val("--mib=")) a.mib = std::atol(v);
    if (auto v = val("--seconds=")) a.seconds = std::atof(v);
    if (auto v = val("--threads=")) a.threads = std::atoi(v);
    if (auto v = val("--conns=")) a.conns = std::atoi(v);
  }
  return a;
}

sockaddr_in addr(const std::string& hostport) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  auto colon = hostport.rfind(':');
  inet_pton(AF_INET, hostport.substr(0, colon).c_str(), &sa.sin_addr);
  sa.sin_port = htons(static_cast<uint16_t>(std::atoi(hostport.c_str() + colon + 1)));
  return sa;
}

bool read_full(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_full(int fd, const void* buf, size_t n) {
  auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t r = ::write(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Connects to `target` (127.0.0.1:port), through the proxy when one is given. -1 on failure.
int open_stream(const Args& a, uint16_t target_port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in sa = a.proxy.empty() ? addr("127.0.0.1:" + std::to_string(target_port)) : addr(a.proxy);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  if (!a.proxy.empty()) {
    // Greeting, then the request once the method is chosen (microsocks needs each message in
    // its own read; pipelining would favour servers that reassemble).
    uint8_t greet[] = {5, 1, 0};
    uint8_t req[] = {5, 1, 0, 1, 127, 0, 0, 1, static_cast<uint8_t>(target_port >> 8),
                     static_cast<uint8_t>(target_port & 0xFF)};
    uint8_t method[2];
    uint8_t resp[10];
    if (!write_full(fd, greet, sizeof greet) || !read_full(fd, method, 2) || method[1] != 0 ||
        !write_full(fd, req, sizeof req) || !read_full(fd, resp, 10) || resp[1] != 0) {
      ::close(fd);
      return -1;
    }
  }
  return fd;
}

// Sink/echo server: the first byte picks the behaviour ('S' sink: read to EOF then answer "K";
// 'E' echo one byte and close; 'I' idle: wait for EOF).
class Server {
 public:
  Server() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa = addr("127.0.0.1:0");
    ::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    ::listen(fd_, 4096);
    socklen_t len = sizeof sa;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    std::thread([this] { loop(); }).detach();
  }
  uint16_t port() const { return port_; }

 private:
  void loop() {
    for (;;) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      char kind = 0;
      if (::read(c, &kind, 1) != 1) {
        ::close(c);
        continue;
      }
      if (kind == 'E') {
        // Answered inline: a thread per short connection would make the load generator, not
        // the proxy, the bottleneck of the connection-rate test.
        write_full(c, "e", 1);
        ::close(c);
        continue;
      }
      std::thread([c, kind] {
        {
          if (kind == 'S') {
            // 'S' + 8-byte length, then that many bytes; answers "K". (No reliance on
            // half-close: microsocks does not pass it on.)
            uint64_t want = 0;
            std::vector<char> buf(256 * 1024);
            if (read_full(c, &want, sizeof want)) {
              while (want > 0) {
                ssize_t r = ::read(c, buf.data(), std::min<uint64_t>(want, buf.size()));
                if (r <= 0) break;
                want -= static_cast<uint64_t>(r);
              }
              write_full(c, "K", 1);
            }
          } else {
            char b;
            while (::read(c, &b, 1) > 0) {
            }
          }
        }
        ::close(c);
      }).detach();
    }
  }
  int fd_ = -1;
  uint16_t port_ = 0;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  rlimit rl{65536, 65536};
  ::setrlimit(RLIMIT_NOFILE, &rl);
  Server server;
  if (a.mode == "bulk") {
    int fd = open_stream(a, server.port());
    if (fd < 0) return 1;
    std::vector<char> buf(256 * 1024, 'x');
    long total = a.mib * 1024 * 1024;
    uint64_t len = static_cast<uint64_t>(total);
    double t0 = now_s();
    if (!write_full(fd, "S", 1) || !write_full(fd, &len, sizeof len)) return 1;
    for (long sent = 0; sent < total; sent += static_cast<long>(buf.size())) {
      if (!write_full(fd, buf.data(), buf.size())) return 1;
    }
    char k;
    if (!read_full(fd, &k, 1)) return 1;
    double dt = now_s() - t0;
    std::printf("bulk_mib_s=%.0f\n", static_cast<double>(a.mib) / dt);
    return 0;
  }
  if (a.mode == "cps") {
    std::atomic<long> done{0}, failed{0};
    double end = now_s() + a.seconds;
    std::vector<std::thread> ts;
    double t0 = now_s();
    for (int i = 0; i < a.threads; ++i) {
      ts.emplace_back([&] {
        while (now_s() < end) {
          int fd = open_stream(a, server.port());
          char e;
          if (fd >= 0 && write_full(fd, "E", 1) && read_full(fd, &e, 1)) {
            ++done;
          } else {
            ++failed;
          }
          if (fd >= 0) ::close(fd);
        }
      });
    }
    for (auto& t : ts) t.join();
    std::printf("cps=%.0f failed=%ld\n", static_cast<double>(done) / (now_s() - t0), failed.load());
    return 0;
  }
  if (a.mode == "idle") {
    std::vector<int> fds;
    for (int i = 0; i < a.conns; ++i) {
      int fd = open_stream(a, server.port());
      if (fd < 0 || !write_full(fd, "I", 1)) {
        std::fprintf(stderr, "idle: connection %d failed\n", i);
        return 1;
      }
      fds.push_back(fd);
    }
    std::printf("ready\n");
    std::fflush(stdout);
    char c;
    while (::read(0, &c, 1) > 0) {
    }
    for (int fd : fds) ::close(fd);
    return 0;
  }
  std::fprintf(stderr, "usage: socks5_bench bulk|cps|idle [--proxy=HOST:PORT] ...\n");
  return 2;
}
