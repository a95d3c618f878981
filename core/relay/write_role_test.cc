#include "core/relay/write_role.h"

#include <string>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

using konn::core::relay::WriteRole;

namespace {

struct Pair {
  int fd[2] = {-1, -1};
  Pair() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0); }
  ~Pair() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  std::string read_available() {
    std::string out(1 << 20, '\0');
    ssize_t n = ::recv(fd[1], out.data(), out.size(), MSG_DONTWAIT);
    out.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return out;
  }
};

}  // namespace

TEST_CASE("write role: closed until the owner opens it and every delivery asks for a post",
          "[relay]") {
  Pair p;
  WriteRole role;
  auto r = role.deliver("abc", 1024);
  CHECK(r.post);
  CHECK(r.written == 0);
  // A delivery is on its way to the owner: opening must wait for it.
  role.open(p.fd[0]);
  CHECK(role.deliver("def", 1024).post);
  role.arrived();
  role.open(p.fd[0]);
  CHECK(role.deliver("x", 1024).post);  // "def" was still on its way
  role.arrived();
  role.arrived();
  role.open(p.fd[0]);
  r = role.deliver("hello", 1024);
  CHECK_FALSE(r.post);
  CHECK(r.written == 5);
  CHECK(p.read_available() == "hello");
}

TEST_CASE("write role: a packet over the limit goes to the owner and so do the ones after it",
          "[relay]") {
  Pair p;
  WriteRole role;
  role.open(p.fd[0]);
  auto r = role.deliver(std::string(100, 'a'), 10);
  CHECK(r.post);
  CHECK(r.written == 0);
  CHECK(role.deliver("b", 10).post);  // must not overtake the large one
  CHECK(p.read_available().empty());
  role.arrived();
  role.arrived();
  role.open(p.fd[0]);
  CHECK_FALSE(role.deliver("c", 10).post);
  CHECK(p.read_available() == "c");
}

TEST_CASE("write role: a full socket takes what fits and the rest goes to the owner", "[relay]") {
  Pair p;
  int small = 4096;
  REQUIRE(::setsockopt(p.fd[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small) == 0);
  WriteRole role;
  role.open(p.fd[0]);
  std::string big(4 << 20, 'z');
  auto r = role.deliver(big, big.size());
  CHECK(r.post);
  CHECK(r.written > 0);
  CHECK(r.written < big.size());
  CHECK(role.deliver("after", 1024).post);
}

TEST_CASE("write role: a write error leaves the packet to the owner without SIGPIPE", "[relay]") {
  Pair p;
  ::close(p.fd[1]);
  p.fd[1] = -1;
  WriteRole role;
  role.open(p.fd[0]);
  auto r = role.deliver("lost?", 1024);  // EPIPE: the owner's own write reports it
  CHECK(r.post);
  CHECK(r.written == 0);
}

TEST_CASE("write role: close takes the role back", "[relay]") {
  Pair p;
  WriteRole role;
  role.open(p.fd[0]);
  role.close();
  CHECK(role.deliver("x", 1024).post);
  CHECK(p.read_available().empty());
  role.open(-1);  // no socket: stays closed
  role.arrived();
  role.open(-1);
  CHECK(role.deliver("y", 1024).post);
}
