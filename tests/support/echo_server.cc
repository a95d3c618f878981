#include "tests/support/echo_server.h"

#include <vector>

#include <openssl/evp.h>

#include "core/io/asio_compat.h"

namespace konn::testsupport {
namespace {

using asio::ip::tcp;
using core::io::use_nothrow;

std::string hex(const unsigned char* d, unsigned n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += digits[d[i] >> 4];
    out += digits[d[i] & 15];
  }
  return out;
}

asio::awaitable<void> echo(tcp::socket s, std::atomic<size_t>* active, std::atomic<uint64_t>* bytes,
                           EchoServer* server, bool hash) {
  std::vector<char> buf(256 * 1024);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md(nullptr, &EVP_MD_CTX_free);
  if (hash) {
    md.reset(EVP_MD_CTX_new());
    EVP_DigestInit_ex(md.get(), EVP_sha256(), nullptr);
  }
  for (;;) {
    auto [rec, n] = co_await s.async_read_some(asio::buffer(buf), use_nothrow);
    if (rec) break;
    if (md) EVP_DigestUpdate(md.get(), buf.data(), n);
    auto [wec, w] = co_await asio::async_write(s, asio::buffer(buf.data(), n), use_nothrow);
    if (wec) break;
    bytes->fetch_add(w);
  }
  if (md) {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_DigestFinal_ex(md.get(), d, &len);
    server->add_digest(hex(d, len));
  }
  std::error_code ignored;
  s.shutdown(tcp::socket::shutdown_send, ignored);
  s.close(ignored);
  active->fetch_sub(1);
}

}  // namespace

EchoServer::EchoServer(bool hash)
    : acceptor_(ctx_, tcp::endpoint(asio::ip::address_v4::loopback(), 0)), hash_(hash) {
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
          asio::co_spawn(ctx_, echo(std::move(s), &active_, &bytes_, this, hash_), asio::detached);
        }
      },
      asio::detached);
  thread_ = std::thread([this] { ctx_.run(); });
}

EchoServer::~EchoServer() {
  ctx_.stop();
  thread_.join();
}

std::vector<std::string> EchoServer::digests() const {
  std::lock_guard lock(mu_);
  return digests_;
}

void EchoServer::add_digest(std::string hex) {
  std::lock_guard lock(mu_);
  digests_.push_back(std::move(hex));
}

std::string EchoServer::address() const { return "127.0.0.1:" + std::to_string(port_); }

}  // namespace konn::testsupport
