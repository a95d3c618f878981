#include "bench/loadgen/destination.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "bench/loadgen/pattern.h"
#include "bench/loadgen/seeded_bytes.h"
#include "bench/loadgen/sha256.h"
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

// Counts one open connection for as long as its coroutine frame lives.
struct OpenCount {
  explicit OpenCount(std::shared_ptr<std::atomic<int64_t>> c) : count(std::move(c)) { ++*count; }
  ~OpenCount() { --*count; }
  OpenCount(const OpenCount&) = delete;
  OpenCount& operator=(const OpenCount&) = delete;
  std::shared_ptr<std::atomic<int64_t>> count;
};

struct Counters {
  std::shared_ptr<std::atomic<int64_t>> open;
  std::shared_ptr<std::atomic<int64_t>> echoes;
};

Awaitable<void> serve(tcp::socket s, size_t chunk, Counters counters) {
  OpenCount open(counters.open);
  std::error_code nec;
  s.set_option(tcp::no_delay(true), nec);
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
    case wire::kSeeded: {
      std::array<uint64_t, 2> head{};  // seed, n
      if (auto [ec, got] = co_await asio::async_read(s, asio::buffer(head), use_nothrow); ec) {
        co_return;
      }
      SeededBytes bytes(head[0]);
      std::vector<char> buf(std::min<size_t>(chunk, 64 * 1024));
      for (uint64_t off = 0; off < head[1];) {
        size_t len = static_cast<size_t>(std::min<uint64_t>(buf.size(), head[1] - off));
        bytes.fill(buf.data(), len);
        auto [ec, w] = co_await asio::async_write(s, asio::buffer(buf.data(), len), use_nothrow);
        if (ec) co_return;
        off += len;
      }
      co_await drain_to_eof(s);
      co_return;
    }
    case wire::kHashedEcho: {
      uint64_t n = 0;
      if (auto [ec, got] = co_await asio::async_read(s, asio::buffer(&n, 8), use_nothrow); ec) {
        co_return;
      }
      Sha256 hash;
      std::vector<char> buf(64 * 1024);
      for (uint64_t off = 0; off < n;) {
        size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), n - off));
        auto [ec, got] = co_await s.async_read_some(asio::buffer(buf.data(), want), use_nothrow);
        if (ec) co_return;
        hash.update(buf.data(), got);
        auto [wec, w] = co_await asio::async_write(s, asio::buffer(buf.data(), got), use_nothrow);
        if (wec) co_return;
        off += got;
      }
      const Sha256::Digest digest = hash.finish();
      auto [ec, w] = co_await asio::async_write(s, asio::buffer(digest), use_nothrow);
      if (ec) co_return;
      ++*counters.echoes;
      co_await drain_to_eof(s);
      co_return;
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

Destination::Destination(const DestinationOptions& options) : options_(options) {
  const int threads = std::max(1, options_.threads);
  for (int i = 0; i < threads; ++i) contexts_.push_back(std::make_unique<asio::io_context>(1));
  asio::io_context& main_ctx = *contexts_[0];
  acceptor_ = std::make_unique<tcp::acceptor>(main_ctx);
  const tcp::endpoint ep(asio::ip::make_address(options_.bind),
                         static_cast<uint16_t>(options_.port));
  acceptor_->open(ep.protocol());
  acceptor_->set_option(tcp::acceptor::reuse_address(true));
  acceptor_->bind(ep);
  acceptor_->listen(4096);
  port_ = acceptor_->local_endpoint().port();

  // Accepted sockets go round-robin to the io_contexts; each connection lives on one.
  Counters counters{open_, echoes_};
  auto accepted = accepted_;
  const size_t chunk = options_.chunk;
  asio::co_spawn(
      main_ctx,
      [this, counters, accepted, chunk]() -> Awaitable<void> {
        for (size_t next = 0;; ++next) {
          auto& ctx = *contexts_[next % contexts_.size()];
          auto [ec, s] = co_await acceptor_->async_accept(ctx, use_nothrow);
          if (ec == asio::error::operation_aborted) co_return;
          if (ec) continue;  // EMFILE and friends: keep serving the others
          ++*accepted;
          asio::co_spawn(ctx, serve(std::move(s), chunk, counters), asio::detached);
        }
      },
      asio::detached);
  for (auto& c : contexts_) {
    threads_.emplace_back([ctx = c.get()] {
      auto guard = asio::make_work_guard(*ctx);
      ctx->run();
    });
  }
}

Destination::~Destination() { stop(); }

void Destination::stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& c : contexts_) c->stop();
  for (auto& t : threads_) t.join();
  acceptor_.reset();
  // Connection coroutines still suspended are destroyed with their io_context (sockets closed).
  contexts_.clear();
}

int run_destination(const DestinationOptions& options) {
  Destination dest(options);
  std::printf("listening on %s:%u\n", options.bind.c_str(), dest.port());
  std::fflush(stdout);
  asio::io_context signal_ctx(1);
  asio::signal_set signals(signal_ctx, SIGINT, SIGTERM);
  signals.async_wait([](std::error_code, int) {});
  signal_ctx.run();
  dest.stop();
  return 0;
}

}  // namespace konn::bench
