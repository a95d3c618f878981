#include "tests/support/echo_server.h"

#include <asio/connect.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include "tests/support/process_runner.h"

using namespace konn::testsupport;

TEST_CASE("echo server: echoes bytes per connection and counts them", "[support]") {
  EchoServer echo;
  asio::io_context ctx;
  asio::ip::tcp::socket a(ctx), b(ctx);
  a.connect({asio::ip::address_v4::loopback(), echo.port()});
  b.connect({asio::ip::address_v4::loopback(), echo.port()});
  std::string big(1 << 20, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  // Written and read in pieces so neither side's socket buffer fills.
  std::string back(big.size(), '\0');
  for (size_t off = 0; off < big.size(); off += 64 * 1024) {
    asio::write(a, asio::buffer(big.data() + off, 64 * 1024));
    asio::read(a, asio::buffer(back.data() + off, 64 * 1024));
  }
  CHECK(back == big);
  asio::write(b, asio::buffer(std::string("ping")));
  char buf[4];
  asio::read(b, asio::buffer(buf));
  CHECK(std::string(buf, 4) == "ping");
  CHECK(echo.accepted() == 2);
  // The server counts a write when it completes, which can be just after the client has read
  // the bytes back: wait (bounded) for the count, then require it exactly.
  CHECK(eventually([&] { return echo.bytes_echoed() == big.size() + 4; }, 5s));
  a.shutdown(asio::ip::tcp::socket::shutdown_send);
  std::error_code ec;
  asio::read(a, asio::buffer(buf), ec);
  CHECK(ec == asio::error::eof);
  CHECK(eventually([&] { return echo.active() == 1; }, 2s));
}

TEST_CASE("echo server: SHA-256 of each finished connection", "[support]") {
  EchoServer echo(true);
  asio::io_context ctx;
  asio::ip::tcp::socket a(ctx);
  a.connect({asio::ip::address_v4::loopback(), echo.port()});
  asio::write(a, asio::buffer(std::string("abc")));
  char buf[3];
  asio::read(a, asio::buffer(buf));
  a.shutdown(asio::ip::tcp::socket::shutdown_send);
  std::error_code ec;
  asio::read(a, asio::buffer(buf), ec);
  REQUIRE(eventually([&] { return echo.digests().size() == 1; }, 2s));
  CHECK(echo.digests()[0] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
