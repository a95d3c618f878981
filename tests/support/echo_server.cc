#include "tests/support/echo_server.h"

#include <vector>

#include "core/io/asio_compat.h"

namespace konn::testsupport {
namespace {

using asio::ip::tcp;
using core::io::use_nothrow;

asio::awaitable<void> echo(tcp::socket s, std::atomic<size_t>* active,
                           std::atomic<uint64_t>* bytes) {
  std::vector<char> buf(256 * 1024);
  for (;;) {
    auto [rec, n] = co_await s.async_read_some(asio::buffer(buf), use_nothrow);
    if (rec) break;
    auto [wec, w] = co_await asio::async_write(s, asio::buffer(buf.data(), n), use_nothrow);
    if (wec) break;
    bytes->fetch_add(w);
  }
  std::error_code ignored;
  s.shutdown(tcp::socket::shutdown_send, ignored);
  s.close(ignored);
  active->fetch_sub(1);
}

}  // namespace

EchoServer::EchoServer() : acceptor_(ctx_, tcp::endpoint(asio::ip::address_v4::loopback(), 0)) {
  port_ = acceptor_.local_endpoint().port();
  asio::co_spawn(
      ctx_,
      [this]() -> asio::awaitable<void> {
        for (;;) {
          auto [ec, s] = co_await acceptor_.async_accept(use_nothrow);
          if (ec) {
            if (ec == asio::error::operation_aborted) co_return;
            continue;
          }
          std::error_code ignored;
          s.set_option(tcp::no_delay(true), ignored);
          accepted_.fetch_add(1);
          active_.fetch_add(1);
          asio::co_spawn(ctx_, echo(std::move(s), &active_, &bytes_), asio::detached);
        }
      },
      asio::detached);
  thread_ = std::thread([this] { ctx_.run(); });
}

EchoServer::~EchoServer() {
  ctx_.stop();
  thread_.join();
}

std::string EchoServer::address() const { return "127.0.0.1:" + std::to_string(port_); }

}  // namespace konn::testsupport
