#include "core/tunnel/socket_reader.h"

#include <string>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/error.hpp>
#include <catch2/catch.hpp>

#include "core/tunnel/packet.h"

using konn::core::tunnel::kReadChunk;
using konn::core::tunnel::kSmallRead;
using konn::core::tunnel::SocketReader;

namespace {

// A connected pair of unix stream sockets with room for a few hundred KiB in flight.
struct Pair {
  int reader = -1;
  int writer = -1;
  Pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    reader = fds[0];
    writer = fds[1];
    int size = 1024 * 1024;
    ::setsockopt(writer, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    ::setsockopt(reader, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  }
  ~Pair() {
    if (reader >= 0) ::close(reader);
    if (writer >= 0) ::close(writer);
  }
  void send(const std::string& bytes) const {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::send(writer, bytes.data() + done, bytes.size() - done, 0);
      REQUIRE(n > 0);
      done += static_cast<size_t>(n);
    }
  }
};

std::string pattern(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i % 251);
  return s;
}

}  // namespace

TEST_CASE("socket reader: a small read comes back at its size, without waiting") {
  Pair p;
  SocketReader r;
  std::error_code ec;

  SECTION("nothing there yet is would_block, not an error or an end") {
    CHECK(r.read(p.reader, kReadChunk, ec).empty());
    CHECK(ec == asio::error::would_block);
  }
  SECTION("a request's bytes, exactly") {
    p.send("GET / HTTP/1.1\r\n\r\n");
    std::string got = r.read(p.reader, kReadChunk, ec);
    CHECK_FALSE(ec);
    CHECK(got == "GET / HTTP/1.1\r\n\r\n");
    CHECK(got.capacity() < 1024);  // not a chunk holding a few bytes
    CHECK_FALSE(r.reading_chunks());
    CHECK(r.read(p.reader, kReadChunk, ec).empty());
    CHECK(ec == asio::error::would_block);
  }
  SECTION("no more than the limit (the tunnel's credit)") {
    p.send(pattern(100, 'a'));
    std::string first = r.read(p.reader, 10, ec);
    CHECK_FALSE(ec);
    CHECK(first == pattern(100, 'a').substr(0, 10));
    std::string rest = r.read(p.reader, kReadChunk, ec);
    CHECK(rest == pattern(100, 'a').substr(10));
  }
  SECTION("the end of the stream, after the bytes before it") {
    p.send("bye");
    ::shutdown(p.writer, SHUT_WR);
    CHECK(r.read(p.reader, kReadChunk, ec) == "bye");
    CHECK_FALSE(ec);
    CHECK(r.read(p.reader, kReadChunk, ec).empty());
    CHECK(ec == asio::error::eof);
  }
  SECTION("a read error is reported as such") {
    ::close(p.reader);
    const int fd = p.reader;
    p.reader = -1;
    CHECK(r.read(fd, kReadChunk, ec).empty());
    CHECK(ec.value() == EBADF);
  }
}

TEST_CASE("socket reader: bulk switches to whole chunks and back") {
  Pair p;
  SocketReader r;
  std::error_code ec;
  // More than the thread's buffer: the first read fills it, the next takes the rest at once.
  const std::string bulk = pattern(200 * 1024, 'x');
  p.send(bulk);
  std::string first = r.read(p.reader, kReadChunk, ec);
  CHECK_FALSE(ec);
  REQUIRE(first.size() == 64 * 1024);
  CHECK(r.reading_chunks());
  std::string second = r.read(p.reader, kReadChunk, ec);
  CHECK_FALSE(ec);
  CHECK(first + second == bulk);
  CHECK(r.reading_chunks());  // a large read: the connection is still moving bulk

  SECTION("a few bytes in chunk mode get a string of their size, and end chunk mode") {
    p.send("ok");
    std::string got = r.read(p.reader, kReadChunk, ec);
    CHECK(got == "ok");
    CHECK(got.capacity() < kSmallRead);
    CHECK_FALSE(r.reading_chunks());
  }
  SECTION("chunk mode honours the limit too") {
    p.send(pattern(kSmallRead * 2, 'q'));
    std::string got = r.read(p.reader, kSmallRead + 5, ec);
    CHECK(got == pattern(kSmallRead * 2, 'q').substr(0, kSmallRead + 5));
  }
  SECTION("the end of the stream in chunk mode") {
    ::shutdown(p.writer, SHUT_WR);
    CHECK(r.read(p.reader, kReadChunk, ec).empty());
    CHECK(ec == asio::error::eof);
    CHECK_FALSE(r.reading_chunks());
  }
}
