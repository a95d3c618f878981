#include "core/net/dialer.h"

#include <filesystem>
#include <future>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "core/error/errc.h"
#include "core/net/listener.h"

using namespace std::chrono_literals;
using konn::core::net::dial_tcp;
using konn::core::net::DialResult;

namespace {

DialResult dial(asio::io_context& ctx, const std::string& address,
                konn::core::net::AddressFilter allowed = {}) {
  std::promise<DialResult> p;
  auto f = p.get_future();
  asio::co_spawn(
      ctx,
      [&]() -> konn::core::io::Awaitable<void> {
        p.set_value(co_await dial_tcp(ctx.get_executor(), address, 2000ms, allowed));
      },
      asio::detached);
  ctx.run();
  ctx.restart();
  return f.get();
}

size_t thread_count() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& t : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
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

TEST_CASE("dial_tcp takes an IP literal as it is, without a lookup thread", "[net]") {
  asio::io_context ctx;
  auto v4 = konn::core::net::listen_tcp(ctx, "127.0.0.1", 0);
  size_t before = thread_count();
  auto r = dial(ctx, "127.0.0.1:" + std::to_string(v4.local_endpoint().port()));
  REQUIRE_FALSE(r.ec);
  CHECK(r.socket.remote_endpoint().port() == v4.local_endpoint().port());
  // Asio's resolver starts its getaddrinfo thread on the first lookup of an io_context and keeps
  // it until the io_context goes: a literal must not have needed it.
  CHECK(thread_count() == before);

  std::error_code no_v6;
  asio::ip::tcp::acceptor v6(ctx);
  v6.open(asio::ip::tcp::v6(), no_v6);
  if (!no_v6) v6.bind({asio::ip::address_v6::loopback(), 0}, no_v6);
  if (!no_v6) v6.listen(asio::socket_base::max_listen_connections, no_v6);
  if (!no_v6) {
    auto r6 = dial(ctx, "[::1]:" + std::to_string(v6.local_endpoint().port()));
    REQUIRE_FALSE(r6.ec);
    CHECK(r6.socket.remote_endpoint().address() == asio::ip::address_v6::loopback());
    CHECK(thread_count() == before);
  }

  // A name still resolves (and only then does the lookup thread appear).
  auto named = dial(ctx, "localhost:" + std::to_string(v4.local_endpoint().port()));
  CHECK_FALSE(named.ec);
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

TEST_CASE("dial_tcp checks every resolved address and tries only allowed ones", "[net]") {
  asio::io_context ctx;
  auto acceptor = konn::core::net::listen_tcp(ctx, "127.0.0.1", 0);
  auto port = std::to_string(acceptor.local_endpoint().port());
  SECTION("a name whose addresses are all refused is never connected") {
    auto r = dial(ctx, "localhost:" + port, [](const asio::ip::tcp::endpoint&) { return false; });
    CHECK(r.ec == konn::Errc::DestinationNotAllowed);
    CHECK(r.error_text.find("dial tcp localhost:" + port + ": destination ") == 0);
    CHECK(r.error_text.find("127.0.0.1") != std::string::npos);
    CHECK(r.error_text.find("not allowed") != std::string::npos);
    acceptor.non_blocking(true);
    std::error_code ec;
    acceptor.accept(ec);
    CHECK(ec == asio::error::would_block);  // no connection reached the listener
  }
  SECTION("an IP literal refused") {
    auto r = dial(ctx, "127.0.0.1:" + port, [](const asio::ip::tcp::endpoint& ep) {
      return ep.address() != asio::ip::make_address("127.0.0.1");
    });
    CHECK(r.ec == konn::Errc::DestinationNotAllowed);
  }
  SECTION("only the allowed addresses of a name are tried") {
    auto r = dial(ctx, "localhost:" + port,
                  [](const asio::ip::tcp::endpoint& ep) { return ep.address().is_v4(); });
    REQUIRE_FALSE(r.ec);
    CHECK(r.socket.remote_endpoint().address().is_v4());
  }
}

TEST_CASE("begin_connect to a listener on this host is connected when it returns", "[net]") {
  // The loopback handshake runs within connect(2), so the answer is there when begin_connect
  // returns; a kernel may defer that work under load, so one connect in 20 is asked for (a
  // non-blocking connect(2) asked once is never connected at once).
  asio::io_context ctx;
  auto acceptor = konn::core::net::listen_tcp(ctx, "127.0.0.1", 0);
  int at_once = 0;
  for (int i = 0; i < 20; ++i) {
    asio::ip::tcp::socket s(ctx);
    std::error_code ec = konn::core::net::begin_connect(s, acceptor.local_endpoint());
    if (ec == asio::error::in_progress) {
      s.wait(asio::socket_base::wait_write);
      ec = konn::core::net::end_connect(s);
    } else if (!ec) {
      ++at_once;
    }
    REQUIRE_FALSE(ec);
    CHECK(s.remote_endpoint().port() == acceptor.local_endpoint().port());
    asio::ip::tcp::no_delay nd;
    s.get_option(nd);
    CHECK(nd.value());
    CHECK(s.non_blocking());
    asio::ip::tcp::socket peer(ctx);
    acceptor.accept(peer);
    CHECK(peer.remote_endpoint() == s.local_endpoint());
  }
  CHECK(at_once > 0);
}

TEST_CASE("begin_connect to a closed port on this host reports the refusal at once", "[net]") {
  asio::io_context ctx;
  asio::ip::tcp::endpoint closed;
  {
    auto a = konn::core::net::listen_tcp(ctx, "127.0.0.1", 0);
    closed = a.local_endpoint();
  }
  int at_once = 0;  // as above: one in 20 is asked for
  for (int i = 0; i < 20; ++i) {
    asio::ip::tcp::socket s(ctx);
    std::error_code ec = konn::core::net::begin_connect(s, closed);
    if (ec == asio::error::in_progress) {
      s.wait(asio::socket_base::wait_write);
      ec = konn::core::net::end_connect(s);
    } else {
      ++at_once;
    }
    CHECK(ec == asio::error::connection_refused);
  }
  CHECK(at_once > 0);
}

TEST_CASE("begin_connect to a destination still in its handshake leaves the wait to the caller",
          "[net]") {
  // A listener whose accept queue is full drops SYNs, so a connect to it stays in SYN_SENT until
  // the queue has room and the SYN is sent again (after about a second).
  asio::io_context ctx;
  asio::ip::tcp::acceptor acceptor(ctx, asio::ip::tcp::v4());
  acceptor.bind({asio::ip::make_address("127.0.0.1"), 0});
  acceptor.listen(0);
  std::vector<asio::ip::tcp::socket> queued;
  asio::ip::tcp::socket pending(ctx);
  for (int i = 0; i < 16; ++i) {
    asio::ip::tcp::socket s(ctx);
    std::error_code ec = konn::core::net::begin_connect(s, acceptor.local_endpoint());
    if (ec == asio::error::in_progress) {
      pending = std::move(s);
      break;
    }
    REQUIRE_FALSE(ec);
    queued.push_back(std::move(s));
  }
  REQUIRE(pending.is_open());
  for (size_t i = 0; i < queued.size(); ++i) {
    asio::ip::tcp::socket drained(ctx);
    acceptor.accept(drained);
  }
  std::error_code waited = asio::error::timed_out;
  pending.async_wait(asio::socket_base::wait_write, [&](std::error_code ec) { waited = ec; });
  ctx.run_for(10s);
  REQUIRE_FALSE(waited);
  CHECK_FALSE(konn::core::net::end_connect(pending));
  asio::ip::tcp::no_delay nd;
  pending.get_option(nd);
  CHECK(nd.value());
  asio::ip::tcp::socket peer(ctx);
  acceptor.accept(peer);
  CHECK(peer.remote_endpoint() == pending.local_endpoint());
}
