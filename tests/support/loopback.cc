#include "tests/support/loopback.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <random>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

namespace konn::testsupport {
namespace {

sockaddr_in loopback_addr(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

[[noreturn]] void fail(const char* what) {
  throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

uint16_t bound_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) fail("getsockname");
  return ntohs(a.sin_port);
}

}  // namespace

uint16_t free_tcp_port() {
  // Drawn below the kernel's ephemeral range, so no bind to port 0 and no outgoing connection
  // (which take their ports from that range) can be handed the same port between this call and
  // the daemon's bind: a daemon's --admin-port=0 once got the --agent-port picked here. Only
  // another free_tcp_port() drawing the same number, one in about 20 000, still races.
  static thread_local std::mt19937 rng(std::random_device{}());
  int low = 32768;
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &low) != 1) low = 32768;
    std::fclose(f);
  }
  const int first = 10000;
  for (int attempt = 0; low - 1 > first && attempt < 64; ++attempt) {
    auto port = static_cast<uint16_t>(std::uniform_int_distribution<int>(first, low - 1)(rng));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail("socket");
    sockaddr_in a = loopback_addr(port);
    bool free = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    if (free) return port;
  }
  // No room below the ephemeral range: let the kernel choose, as before.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("socket");
  sockaddr_in a = loopback_addr(0);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    fail("bind");
  }
  uint16_t port = bound_port(fd);
  close(fd);
  return port;
}

bool tcp_port_accepts(uint16_t port, int timeout_ms) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  sockaddr_in a = loopback_addr(port);
  bool ok = false;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    ok = true;
  } else if (errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, timeout_ms) == 1) {
      int err = 0;
      socklen_t len = sizeof(err);
      ok = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
  }
  close(fd);
  return ok;
}

StuckListener::StuckListener() {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) fail("socket");
  sockaddr_in a = loopback_addr(0);
  // Backlog 0 still admits one connection to the accept queue on Linux; the filler takes it, and
  // every later SYN is dropped while the queue stays full.
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(listen_fd_, 0) != 0) {
    close(listen_fd_);
    fail("bind/listen");
  }
  port_ = bound_port(listen_fd_);
  filler_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to = loopback_addr(port_);
  if (filler_fd_ < 0 || connect(filler_fd_, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(listen_fd_);
    if (filler_fd_ >= 0) close(filler_fd_);
    fail("connect filler");
  }
}

StuckListener::~StuckListener() {
  close(filler_fd_);
  close(listen_fd_);
}

std::pair<asio::ip::tcp::socket, asio::ip::tcp::socket> tcp_pair(asio::io_context& ctx) {
  asio::ip::tcp::acceptor acceptor(ctx, {asio::ip::address_v4::loopback(), 0});
  asio::ip::tcp::socket dialled(ctx);
  dialled.connect(acceptor.local_endpoint());
  return {std::move(dialled), acceptor.accept()};
}

}  // namespace konn::testsupport
