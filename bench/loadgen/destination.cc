#include "bench/loadgen/destination.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "bench/loadgen/pattern.h"
#include "core/io/asio_compat.h"

namespace konn::bench {

using asio::ip::tcp;
using core::io::Awaitable;
using core::io::use_nothrow;

namespace {

Awaitable<void> drain_to_eof(tcp::socket& s) {
  std::vector<char> buf(64 * 1024);
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_nothrow);
    if (ec) co_return;
  }
}

Awaitable<void> serve(tcp::socket s, size_t chunk) {
  s.set_option(tcp::no_delay(true));
  char kind = 0;
  if (auto [ec, n] = co_await asio::async_read(s, asio::buffer(&kind, 1), use_nothrow); ec) {
    co_return;
  }
  const Pattern& pat = Pattern::get();
  chunk = std::min(chunk, Pattern::kMaxSpan);
  switch (kind) {
    case wire::kDownload: {
      uint64_t n = 0;
      if (auto [ec, got] = co_await asio::async_read(s, asio::buffer(&n, 8), use_nothrow); ec) {
        co_return;
      }
      for (uint64_t off = 0; off < n;) {
        size_t len = static_cast<size_t>(std::min<uint64_t>(chunk, n - off));
        auto [ec, w] = co_await asio::async_write(s, asio::buffer(pat.at(off), len), use_nothrow);
        if (ec) co_return;
        off += len;
      }
      co_await drain_to_eof(s);
      co_return;
    }
    case wire::kUpload: {
      uint64_t n = 0;
      if (auto [ec, got] = co_await asio::async_read(s, asio::buffer(&n, 8), use_nothrow); ec) {
        co_return;
      }
      std::vector<char> buf(std::max<size_t>(chunk, 64 * 1024));
      bool good = true;
      uint64_t off = 0;
      while (off < n) {
        size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), n - off));
        auto [ec, got] = co_await s.async_read_some(asio::buffer(buf.data(), want), use_nothrow);
        if (ec) {
          std::fprintf(stderr, "destination: upload ended after %llu of %llu bytes: %s\n",
                       static_cast<unsigned long long>(off), static_cast<unsigned long long>(n),
                       ec.message().c_str());
          co_return;
        }
        if (good && !pat.check(off, buf.data(), got)) {
          std::fprintf(stderr, "destination: upload bytes wrong near offset %llu\n",
                       static_cast<unsigned long long>(off));
          good = false;
        }
        off += got;
      }
      const char answer = good ? wire::kUploadOk : wire::kUploadBad;
      auto [ec, w] = co_await asio::async_write(s, asio::buffer(&answer, 1), use_nothrow);
      if (!ec) co_await drain_to_eof(s);
      co_return;
    }
    case wire::kEcho: {
      std::vector<char> buf(64 * 1024);
      for (;;) {
        auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_nothrow);
        if (ec) co_return;
        auto [wec, w] = co_await asio::async_write(s, asio::buffer(buf.data(), n), use_nothrow);
        if (wec) co_return;
      }
    }
    case wire::kHose: {
      for (uint64_t off = 0;; off += chunk) {
        auto [ec, w] = co_await asio::async_write(s, asio::buffer(pat.at(off), chunk), use_nothrow);
        if (ec) co_return;
      }
    }
    default:  // kIdle, and anything unknown
      co_await drain_to_eof(s);
      co_return;
  }
}

}  // namespace

int run_destination(const DestinationOptions& options) {
  const int threads = std::max(1, options.threads);
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  for (int i = 0; i < threads; ++i) contexts.push_back(std::make_unique<asio::io_context>(1));
  asio::io_context& main_ctx = *contexts[0];
  tcp::acceptor acceptor(main_ctx);
  const tcp::endpoint ep(asio::ip::make_address(options.bind), static_cast<uint16_t>(options.port));
  acceptor.open(ep.protocol());
  acceptor.set_option(tcp::acceptor::reuse_address(true));
  acceptor.bind(ep);
  acceptor.listen(4096);
  std::printf("listening on %s:%u\n", options.bind.c_str(), acceptor.local_endpoint().port());
  std::fflush(stdout);

  // Accepted sockets go round-robin to the io_contexts; each connection lives on one.
  asio::co_spawn(
      main_ctx,
      [&]() -> Awaitable<void> {
        for (size_t next = 0;; ++next) {
          auto& ctx = *contexts[next % contexts.size()];
          auto [ec, s] = co_await acceptor.async_accept(ctx, use_nothrow);
          if (ec == asio::error::operation_aborted) co_return;
          if (ec) continue;  // EMFILE and friends: keep serving the others
          asio::co_spawn(ctx, serve(std::move(s), options.chunk), asio::detached);
        }
      },
      asio::detached);
  asio::signal_set signals(main_ctx, SIGINT, SIGTERM);
  signals.async_wait([&](std::error_code, int) {
    for (auto& c : contexts) c->stop();
  });
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i)
    pool.emplace_back([&, i] {
      auto guard = asio::make_work_guard(*contexts[i]);
      contexts[i]->run();
    });
  main_ctx.run();
  for (auto& c : contexts) c->stop();
  for (auto& t : pool) t.join();
  return 0;
}

}  // namespace konn::bench
