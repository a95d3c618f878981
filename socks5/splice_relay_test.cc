#include "socks5/splice_relay.h"

#include <random>
#include <thread>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include "core/net/listener.h"

using asio::ip::tcp;

namespace {
std::pair<tcp::socket, tcp::socket> socket_pair(asio::io_context& ctx) {
  auto acceptor = konn::core::net::listen_tcp(ctx, "127.0.0.1", 0);
  tcp::socket a(ctx);
  a.connect(acceptor.local_endpoint());
  tcp::socket b = acceptor.accept();
  return {std::move(a), std::move(b)};
}
}  // namespace

TEST_CASE("splice relay moves bytes both ways and passes half-close on", "[splice]") {
  asio::io_context ctx;
  asio::io_context clients;
  auto [client, proxy_down] = socket_pair(ctx);
  auto [proxy_up, server] = socket_pair(ctx);
  konn::socks5::Activity activity;
  konn::core::relay::RelayStats stats;
  bool done = false;
  asio::co_spawn(
      ctx,
      [&]() -> konn::core::io::Awaitable<void> {
        stats = co_await konn::socks5::splice_relay(proxy_down, proxy_up, activity, 16 * 1024);
        done = true;
      },
      asio::detached);
  std::thread io([&] { ctx.run_for(std::chrono::seconds(20)); });

  std::string up(3 << 20, '\0');
  std::mt19937 rng(11);
  for (auto& c : up) c = static_cast<char>(rng());
  std::string down(500000, 'd');
  std::thread writer([&] {
    asio::write(client, asio::buffer(up));
    client.shutdown(tcp::socket::shutdown_send);
  });
  // The server reads everything up to EOF (half-close passed on), then answers.
  std::string got_up;
  std::error_code ec;
  asio::read(server, asio::dynamic_buffer(got_up), ec);
  CHECK(ec == asio::error::eof);
  CHECK(got_up == up);
  asio::write(server, asio::buffer(down));
  server.shutdown(tcp::socket::shutdown_send);
  std::string got_down;
  asio::read(client, asio::dynamic_buffer(got_down), ec);
  CHECK(ec == asio::error::eof);
  CHECK(got_down == down);
  writer.join();
  io.join();
  REQUIRE(done);
  CHECK(stats.downstream_to_upstream == up.size());
  CHECK(stats.upstream_to_downstream == down.size());
  CHECK_FALSE(stats.downstream_error);
  CHECK_FALSE(stats.upstream_error);
}

TEST_CASE("splice relay ends both directions on a reset", "[splice]") {
  asio::io_context ctx;
  auto [client, proxy_down] = socket_pair(ctx);
  auto [proxy_up, server] = socket_pair(ctx);
  konn::socks5::Activity activity;
  bool done = false;
  asio::co_spawn(
      ctx,
      [&]() -> konn::core::io::Awaitable<void> {
        co_await konn::socks5::splice_relay(proxy_down, proxy_up, activity);
        done = true;
      },
      asio::detached);
  // RST from the client: SO_LINGER 0 then close.
  client.set_option(asio::socket_base::linger(true, 0));
  asio::write(client, asio::buffer("x", 1));
  client.close();
  ctx.run_for(std::chrono::seconds(5));
  REQUIRE(done);
  // The server side sees the connection end.
  std::string rest;
  std::error_code ec;
  asio::read(server, asio::dynamic_buffer(rest), ec);
  CHECK(ec);
}
