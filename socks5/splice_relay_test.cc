#include "socks5/splice_relay.h"

#include <cerrno>
#include <random>
#include <sys/stat.h>
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
bool is_socket(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

// splice(2) replacements: unsupported from a socket into the pipe (nothing moved), or from the
// pipe into a socket after the pipe was filled (bytes waiting in the pipe).
ssize_t fail_fill(int in, loff_t* in_off, int out, loff_t* out_off, size_t len, unsigned f) {
  if (is_socket(in)) {
    errno = EINVAL;
    return -1;
  }
  return ::splice(in, in_off, out, out_off, len, f);
}
ssize_t fail_drain(int in, loff_t* in_off, int out, loff_t* out_off, size_t len, unsigned f) {
  if (is_socket(out)) {
    errno = ENOSYS;
    return -1;
  }
  return ::splice(in, in_off, out, out_off, len, f);
}

struct SpliceHook {
  explicit SpliceHook(konn::socks5::SpliceFunction f) {
    konn::socks5::set_splice_function_for_testing(f);
  }
  ~SpliceHook() { konn::socks5::set_splice_function_for_testing(nullptr); }
};

}  // namespace

TEST_CASE("splice unsupported at run time: each direction goes on buffered, no byte lost",
          "[splice]") {
  auto [name, hook, expect_errno] =
      GENERATE(std::make_tuple("socket to pipe fails", &fail_fill, EINVAL),
               std::make_tuple("pipe to socket fails with bytes in the pipe", &fail_drain, ENOSYS));
  INFO(name);
  SpliceHook forced(hook);
  asio::io_context ctx;
  auto [client, proxy_down] = socket_pair(ctx);
  auto [proxy_up, server] = socket_pair(ctx);
  konn::socks5::Activity activity;
  konn::core::relay::RelayStats stats;
  int fallback = 0;
  bool done = false;
  asio::co_spawn(
      ctx,
      [&]() -> konn::core::io::Awaitable<void> {
        stats = co_await konn::socks5::splice_relay(proxy_down, proxy_up, activity, 16 * 1024,
                                                    &fallback);
        done = true;
      },
      asio::detached);
  std::thread io([&] { ctx.run_for(std::chrono::seconds(20)); });

  std::string up(1 << 20, '\0');
  std::mt19937 rng(5);
  for (auto& c : up) c = static_cast<char>(rng());
  std::string down(300000, 'd');
  std::thread writer([&] {
    asio::write(client, asio::buffer(up));
    client.shutdown(tcp::socket::shutdown_send);
  });
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
  CHECK(fallback == expect_errno);
  CHECK(stats.downstream_to_upstream == up.size());
  CHECK(stats.upstream_to_downstream == down.size());
  CHECK_FALSE(stats.downstream_error);
  CHECK_FALSE(stats.upstream_error);
}

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
