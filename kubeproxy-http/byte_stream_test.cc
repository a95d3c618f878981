#include "kubeproxy-http/byte_stream.h"

#include <string>
#include <thread>
#include <tuple>

#include <asio/io_context.hpp>
#include <asio/read.hpp>
#include <catch2/catch.hpp>

#include "tests/support/loopback.h"

using asio::ip::tcp;
using konn::kubeproxy::BufferedTcp;

namespace {

// A connected pair of loopback TCP sockets on one io_context.
struct Pair {
  asio::io_context io;
  tcp::socket near{io};
  tcp::socket far{io};
  Pair() { std::tie(near, far) = konn::testsupport::tcp_pair(io); }
};

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7) % 26);
  return s;
}

// One async_read_some of up to `max` bytes, run to completion.
std::pair<std::error_code, std::string> read_some(Pair& p, BufferedTcp& b, size_t max) {
  std::string buf(max, '\0');
  std::error_code ec;
  size_t n = 0;
  b.async_read_some(asio::buffer(buf), [&](std::error_code e, size_t k) {
    ec = e;
    n = k;
  });
  p.io.restart();
  p.io.run();
  buf.resize(n);
  return {ec, buf};
}

}  // namespace

TEST_CASE("buffered tcp takes what waits in one read and holds the buffer only while it has bytes",
          "[kubeproxy]") {
  Pair p;
  const std::string sent = pattern(100 * 1024);
  asio::write(p.far, asio::buffer(sent));
  // Let all of it arrive, so the first read sees it waiting.
  for (int i = 0; i < 200 && p.near.available() < sent.size(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(p.near.available() == sent.size());

  BufferedTcp b(std::move(p.near));
  CHECK_FALSE(b.holds_buffer());
  auto [ec, first] = read_some(p, b, 16 * 1024);
  REQUIRE_FALSE(ec);
  CHECK(first.size() == 16 * 1024);
  // The rest came out of the socket with the first read.
  CHECK(b.holds_buffer());
  CHECK(b.in_avail() == sent.size() - first.size());
  CHECK(b.next_layer().available() == 0);

  std::string got = first;
  while (got.size() < sent.size()) {
    auto [e, part] = read_some(p, b, 16 * 1024);
    REQUIRE_FALSE(e);
    REQUIRE_FALSE(part.empty());
    got += part;
  }
  CHECK(got == sent);
  CHECK(b.in_avail() == 0);
  CHECK_FALSE(b.holds_buffer());

  // A read that can take everything waiting goes straight into the caller's buffer.
  asio::write(p.far, asio::buffer(std::string("tail")));
  auto [e2, tail] = read_some(p, b, 16 * 1024);
  REQUIRE_FALSE(e2);
  CHECK(tail == "tail");
  CHECK_FALSE(b.holds_buffer());

  p.far.close();
  auto [e3, none] = read_some(p, b, 16 * 1024);
  CHECK(e3 == asio::error::eof);
  CHECK(none.empty());
}

TEST_CASE("buffered tcp waits for bytes without holding a buffer and can be cancelled",
          "[kubeproxy]") {
  Pair p;
  BufferedTcp b(std::move(p.near));
  std::string buf(1024, '\0');
  std::error_code ec;
  bool done = false;
  b.async_read_some(asio::buffer(buf), [&](std::error_code e, size_t) {
    ec = e;
    done = true;
  });
  p.io.poll();
  CHECK_FALSE(done);
  CHECK_FALSE(b.holds_buffer());
  b.next_layer().cancel();
  p.io.restart();
  p.io.run();
  CHECK(done);
  CHECK(ec == asio::error::operation_aborted);
}
