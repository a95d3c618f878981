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

#include "tests/support/loopback.h"

using asio::ip::tcp;

namespace {
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

// One relay through splice_relay between two socket pairs: `up_bytes` of seeded random bytes from
// the client, which then half-closes; the server reads to EOF (the half-close passed on), answers
// `down_bytes` and half-closes too. Both ends' bytes and EOFs are checked here.
struct RoundTrip {
  konn::core::relay::RelayStats stats;
  bool done = false;  // splice_relay returned
  size_t up = 0;
  size_t down = 0;
};

RoundTrip splice_round_trip(size_t up_bytes, size_t down_bytes, unsigned seed, int* fallback) {
  asio::io_context ctx;
  auto [client, proxy_down] = konn::testsupport::tcp_pair(ctx);
  auto [proxy_up, server] = konn::testsupport::tcp_pair(ctx);
  konn::socks5::Activity activity;
  RoundTrip run;
  asio::co_spawn(
      ctx,
      [&]() -> konn::core::io::Awaitable<void> {
        run.stats = co_await konn::socks5::splice_relay(proxy_down, proxy_up, activity, 16 * 1024,
                                                        fallback);
        run.done = true;
      },
      asio::detached);
  std::thread io([&] { ctx.run_for(std::chrono::seconds(20)); });

  std::string up(up_bytes, '\0');
  std::mt19937 rng(seed);
  for (auto& c : up) c = static_cast<char>(rng());
  std::string down(down_bytes, 'd');
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
  run.up = up.size();
  run.down = down.size();
  return run;
}

// The relay counted every byte each way and saw no error.
void check_counts(const RoundTrip& run) {
  CHECK(run.stats.downstream_to_upstream == run.up);
  CHECK(run.stats.upstream_to_downstream == run.down);
  CHECK_FALSE(run.stats.downstream_error);
  CHECK_FALSE(run.stats.upstream_error);
}

}  // namespace

TEST_CASE("splice unsupported at run time: each direction goes on buffered, no byte lost",
          "[splice]") {
  auto [name, hook, expect_errno] =
      GENERATE(std::make_tuple("socket to pipe fails", &fail_fill, EINVAL),
               std::make_tuple("pipe to socket fails with bytes in the pipe", &fail_drain, ENOSYS));
  INFO(name);
  SpliceHook forced(hook);
  int fallback = 0;
  auto run = splice_round_trip(1 << 20, 300000, 5, &fallback);
  REQUIRE(run.done);
  CHECK(fallback == expect_errno);
  check_counts(run);
}

TEST_CASE("splice relay moves bytes both ways and passes half-close on", "[splice]") {
  auto run = splice_round_trip(3 << 20, 500000, 11, nullptr);
  REQUIRE(run.done);
  check_counts(run);
}

TEST_CASE("splice relay ends both directions on a reset", "[splice]") {
  asio::io_context ctx;
  auto [client, proxy_down] = konn::testsupport::tcp_pair(ctx);
  auto [proxy_up, server] = konn::testsupport::tcp_pair(ctx);
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
