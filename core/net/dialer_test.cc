#include "core/net/dialer.h"

#include <future>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "core/net/listener.h"

using namespace std::chrono_literals;
using konn::core::net::DialResult;
using konn::core::net::dial_tcp;

namespace {

DialResult dial(asio::io_context& ctx, const std::string& address) {
  std::promise<DialResult> p;
  auto f = p.get_future();
  asio::co_spawn(
      ctx,
      [&]() -> konn::core::io::Awaitable<void> {
        p.set_value(co_await dial_tcp(ctx.get_executor(), address, 2000ms));
      },
      asio::detached);
  ctx.run();
  ctx.restart();
  return f.get();
}

}  // namespace

TEST_CASE("dial_tcp connects and sets TCP_NODELAY", "[net]") {
  asio::io_context ctx;
  auto acceptor = konn::core::net::listen_tcp(ctx, "127.0.0.1", 0);
  auto port = acceptor.local_endpoint().port();
  auto r = dial(ctx, "127.0.0.1:" + std::to_string(port));
  REQUIRE_FALSE(r.ec);
  asio::ip::tcp::no_delay nd;
  r.socket.get_option(nd);
  CHECK(nd.value());
}

TEST_CASE("dial_tcp to a closed port reports Go-style refusal", "[net]") {
  asio::io_context ctx;
  uint16_t port = 0;
  {
    auto acceptor = konn::core::net::listen_tcp(ctx, "127.0.0.1", 0);
    port = acceptor.local_endpoint().port();
  }
  std::string addr = "127.0.0.1:" + std::to_string(port);
  auto r = dial(ctx, addr);
  CHECK(r.ec);
  CHECK(r.error_text == "dial tcp " + addr + ": connect: connection refused");
}

TEST_CASE("dial_tcp rejects an address without a port", "[net]") {
  asio::io_context ctx;
  auto r = dial(ctx, "localhost");
  CHECK(r.ec);
  CHECK(r.error_text.find("missing port") != std::string::npos);
}
