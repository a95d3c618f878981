// demo-origin: a tiny HTTP server that stands in for a node, webhook or aggregated API behind the
// agent in the local dev setup (scripts/dev-up.sh). Answers every GET with a short page.
// Exception to "parse HTTP with a library": it reads nothing but the end of the request head.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <asio.hpp>

#include "core/io/asio_compat.h"
#include "core/net/listener.h"

namespace {

asio::awaitable<void> serve(asio::ip::tcp::socket s) {
  std::string head;
  char buf[4096];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < 65536) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), konn::core::io::use_nothrow);
    if (ec) co_return;
    head.append(buf, n);
  }
  std::string line = head.substr(0, head.find("\r\n"));
  std::string body = "hello from demo-origin: you asked for \"" + line + "\"\n";
  std::string rsp = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  co_await asio::async_write(s, asio::buffer(rsp), konn::core::io::use_nothrow);
}

asio::awaitable<void> accept_loop(asio::ip::tcp::acceptor acceptor) {
  for (;;) {
    auto [ec, s] = co_await acceptor.async_accept(konn::core::io::use_nothrow);
    if (ec) co_return;
    asio::co_spawn(acceptor.get_executor(), serve(std::move(s)), asio::detached);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int port = argc > 1 ? std::atoi(argv[1]) : 18080;
  asio::io_context ctx;
  auto acceptor = konn::core::net::listen_tcp(ctx, "127.0.0.1", static_cast<uint16_t>(port));
  std::printf("demo-origin listening on 127.0.0.1:%d\n", acceptor.local_endpoint().port());
  std::fflush(stdout);
  asio::co_spawn(ctx, accept_loop(std::move(acceptor)), asio::detached);
  ctx.run();
}
