#include "tests/support/http_server.h"

#include <algorithm>
#include <charconv>
#include <string_view>

#include "core/http/http1_parser.h"
#include "core/io/asio_compat.h"

namespace konn::testsupport {
namespace {

using asio::ip::tcp;
using core::io::use_nothrow;

constexpr size_t kMaxHead = 64 * 1024;
constexpr size_t kPiece = 256 * 1024;

std::string head(int status, const char* reason, uint64_t length, bool close) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(length) +
         (close ? "\r\nConnection: close" : "") + "\r\n\r\n";
}

asio::awaitable<void> serve(tcp::socket s, HttpServer* server) {
  using core::http::Http1Parser;
  Http1Parser parser(Http1Parser::Kind::Request, kMaxHead);
  std::string buf;  // bytes read and not parsed yet: the start of a pipelined request
  std::vector<char> in(16 * 1024);
  for (;;) {
    // One request; a body, if it has one, is read and dropped.
    for (bool complete = false; !complete;) {
      if (buf.empty()) {
        auto [ec, n] = co_await s.async_read_some(asio::buffer(in), use_nothrow);
        if (ec) co_return;
        buf.assign(in.data(), n);
      }
      auto r = parser.feed(buf);
      if (r.status == Http1Parser::Status::Invalid) co_return;
      buf.erase(0, r.consumed);
      complete = r.status == Http1Parser::Status::MessageComplete;
    }
    server->count_request();
    const std::string method = parser.head().method;
    const std::string target = parser.head().target;
    const bool close = !parser.head().keep_alive;
    parser.reset();

    std::string body;
    uint64_t pattern_len = 0;
    bool pattern = false;
    int status = 200;
    const char* reason = "OK";
    if (method != "GET") {
      status = 405;
      reason = "Method Not Allowed";
      body = "only GET\n";
    } else if (target.rfind("/bytes/", 0) == 0) {
      std::string_view n(target);
      n.remove_prefix(7);
      auto [ptr, err] = std::from_chars(n.data(), n.data() + n.size(), pattern_len);
      if (err != std::errc() || ptr != n.data() + n.size()) {
        status = 400;
        reason = "Bad Request";
        body = "bad length\n";
      } else {
        pattern = true;
      }
    } else if (!server->find_page(target, &body)) {
      status = 404;
      reason = "Not Found";
      body = "not found\n";
    }

    std::string h = head(status, reason, pattern ? pattern_len : body.size(), close);
    if (!pattern) {
      h += body;
      auto [ec, w] = co_await asio::async_write(s, asio::buffer(h), use_nothrow);
      if (ec) co_return;
    } else {
      auto [ec, w] = co_await asio::async_write(s, asio::buffer(h), use_nothrow);
      if (ec) co_return;
      // The pattern repeats every 251 bytes, so one buffer starting at offset 0 serves every
      // piece whose offset is a multiple of 251.
      const size_t piece = kPiece - kPiece % 251;
      static const std::string block = HttpServer::pattern(0, piece);
      uint64_t sent = 0;
      while (sent < pattern_len) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(piece, pattern_len - sent));
        auto [wec, wn] = co_await asio::async_write(s, asio::buffer(block.data(), n), use_nothrow);
        if (wec) co_return;
        sent += wn;
      }
    }
    if (close) {
      std::error_code ignored;
      s.shutdown(tcp::socket::shutdown_send, ignored);
      co_return;
    }
  }
}

}  // namespace

HttpServer::HttpServer() : acceptor_(ctx_, tcp::endpoint(asio::ip::address_v4::loopback(), 0)) {
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
          asio::co_spawn(ctx_, serve(std::move(s), this), asio::detached);
        }
      },
      asio::detached);
  thread_ = std::thread([this] { ctx_.run(); });
}

HttpServer::~HttpServer() {
  ctx_.stop();
  thread_.join();
}

void HttpServer::add_page(const std::string& path, const std::string& body) {
  std::lock_guard lock(mu_);
  pages_[path] = body;
}

bool HttpServer::find_page(const std::string& path, std::string* body) {
  std::lock_guard lock(mu_);
  auto it = pages_.find(path);
  if (it == pages_.end()) return false;
  *body = it->second;
  return true;
}

std::string HttpServer::address() const { return "127.0.0.1:" + std::to_string(port_); }

std::string HttpServer::pattern(uint64_t offset, size_t n) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>((offset + i) % 251);
  return out;
}

}  // namespace konn::testsupport
