#include "core/relay/relay.h"

#include <random>
#include <string>
#include <thread>

#include <asio/co_spawn.hpp>
#include <asio/connect.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include "tests/support/loopback.h"

using asio::ip::tcp;

TEST_CASE("relay moves bytes both ways and passes half-close on", "[relay]") {
  asio::io_context ctx;
  auto [client, proxy_down] = konn::testsupport::tcp_pair(ctx);
  auto [proxy_up, server] = konn::testsupport::tcp_pair(ctx);

  konn::core::relay::RelayStats stats;
  asio::co_spawn(ctx,
                 [&]() -> konn::core::io::Awaitable<void> {
                   stats = co_await konn::core::relay::relay(proxy_down, proxy_up, 4096);
                 },
                 asio::detached);
  std::thread io([&] { ctx.run(); });

  std::string up(1 << 20, '\0');
  std::mt19937 rng(7);
  for (auto& c : up) c = static_cast<char>(rng());
  std::string down(300000, 'd');

  std::thread writer([&] {
    asio::write(client, asio::buffer(up));
    client.shutdown(tcp::socket::shutdown_send);
  });
  // The server sees all of `up`, then EOF (the half-close), and can still answer.
  std::string got(up.size(), '\0');
  asio::read(server, asio::buffer(got));
  char extra;
  std::error_code ec;
  server.read_some(asio::buffer(&extra, 1), ec);
  CHECK(ec == asio::error::eof);
  CHECK(got == up);
  asio::write(server, asio::buffer(down));
  server.shutdown(tcp::socket::shutdown_send);
  std::string back(down.size(), '\0');
  asio::read(client, asio::buffer(back));
  client.read_some(asio::buffer(&extra, 1), ec);
  CHECK(ec == asio::error::eof);
  CHECK(back == down);
  writer.join();
  io.join();
  CHECK(stats.downstream_to_upstream == up.size());
  CHECK(stats.upstream_to_downstream == down.size());
  CHECK_FALSE(stats.downstream_error);
}

TEST_CASE("relay closes both sides when one resets", "[relay]") {
  asio::io_context ctx;
  auto [client, proxy_down] = konn::testsupport::tcp_pair(ctx);
  auto [proxy_up, server] = konn::testsupport::tcp_pair(ctx);
  bool done = false;
  asio::co_spawn(ctx,
                 [&]() -> konn::core::io::Awaitable<void> {
                   co_await konn::core::relay::relay(proxy_down, proxy_up);
                   done = true;
                 },
                 asio::detached);
  std::thread io([&] { ctx.run(); });
  client.set_option(asio::socket_base::linger(true, 0));
  client.close();  // RST
  char c;
  std::error_code ec;
  server.read_some(asio::buffer(&c, 1), ec);
  CHECK(ec);
  io.join();
  CHECK(done);
}
