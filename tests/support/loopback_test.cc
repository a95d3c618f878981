#include "tests/support/loopback.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/support/echo_server.h"

using namespace konn::testsupport;

TEST_CASE("loopback: free port is bindable and closed", "[support]") {
  uint16_t port = free_tcp_port();
  CHECK(port != 0);
  CHECK_FALSE(tcp_port_accepts(port, 100));
  EchoServer echo;
  CHECK(tcp_port_accepts(echo.port(), 1000));
}

TEST_CASE("loopback: a free port lies below the ephemeral range, where binds to port 0 never land",
          "[support]") {
  int low = 0;
  std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  REQUIRE(f != nullptr);
  REQUIRE(std::fscanf(f, "%d", &low) == 1);
  std::fclose(f);
  if (low <= 10001) return;  // no room below the range: the kernel's choice is returned
  for (int i = 0; i < 50; ++i) {
    uint16_t port = free_tcp_port();
    CHECK(port >= 10000);
    CHECK(port < low);
  }
}

TEST_CASE("loopback: a stuck listener leaves connects pending", "[support]") {
  StuckListener stuck;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(stuck.port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  REQUIRE(rc < 0);
  REQUIRE(errno == EINPROGRESS);
  pollfd p{fd, POLLOUT, 0};
  // Neither connected nor refused within the time a test would wait for a dial answer.
  CHECK(poll(&p, 1, 300) == 0);
  close(fd);
}
