#include "kubeproxy-http/upgrade.h"

#include <memory>
#include <tuple>
#include <vector>

#include "core/http/http1_parser.h"
#include "kubeproxy-http/watchdog.h"

namespace konn::kubeproxy {
namespace {

// The half-close bound of one relay: armed when the first direction ends, re-armed whenever the
// other moves bytes; on expiry both streams are closed (the remaining direction's wait fails).
struct HalfCloseBound {
  HalfCloseBound(ByteStream& a, ByteStream& b, std::chrono::nanoseconds half_close_timeout)
      : watchdog(a.get_executor(),
                 [this, &a, &b] {
                   timed_out = true;
                   a.close();
                   b.close();
                 }),
        limit(std::chrono::duration_cast<Watchdog::Clock::duration>(half_close_timeout)) {}
  Watchdog watchdog;
  Watchdog::Clock::duration limit;  // zero: no bound
  bool one_side_finished = false;
  bool timed_out = false;
  void moved() {
    if (one_side_finished && limit.count() > 0) watchdog.arm(limit);
  }
  void side_finished() {
    if (one_side_finished) return;
    one_side_finished = true;
    moved();
  }
};

core::io::Awaitable<void> pump(ByteStream& from, ByteStream& to, size_t buffer_size,
                               uint64_t& bytes, std::error_code& error, bool& failed,
                               HalfCloseBound& bound, std::atomic<uint64_t>* moved) {
  // The buffer is taken once `from` is readable and given back when a read drained it, so an
  // idle relay holds none (streams that cannot wait without reading hold it while they wait).
  const bool lazy = from.can_wait_readable();
  std::unique_ptr<char[]> buf;
  for (;;) {
    std::error_code rec;
    size_t n = 0;
    if (lazy) rec = co_await from.wait_readable();
    if (!rec) {
      if (!buf) buf = std::make_unique_for_overwrite<char[]>(buffer_size);
      std::tie(rec, n) = co_await from.read_some(asio::buffer(buf.get(), buffer_size));
    }
    if (n > 0) {
      bound.moved();
      auto [wec, w] = co_await to.write(asio::buffer(buf.get(), n));
      bytes += w;
      if (moved != nullptr) moved->fetch_add(w, std::memory_order_relaxed);
      bound.moved();
      if (wec) {
        if (!error) error = wec;
        break;
      }
    }
    if (lazy && n < buffer_size) buf.reset();
    if (rec) {
      // A TLS peer that closes without close_notify reports stream_truncated: treat as EOF.
      if (rec != asio::error::eof && rec != asio::ssl::error::stream_truncated && !error) {
        error = rec;
      }
      if (rec != asio::error::eof && rec != asio::ssl::error::stream_truncated) failed = true;
      break;
    }
  }
  if (failed || error) {
    failed = true;
    from.close();
    to.close();
  } else {
    to.shutdown_send();
    bound.side_finished();
  }
}

}  // namespace

core::io::Awaitable<StreamRelayStats> relay_streams(ByteStream& downstream, ByteStream& upstream,
                                                    size_t buffer_size,
                                                    std::chrono::nanoseconds half_close_timeout,
                                                    std::atomic<uint64_t>* moved_up,
                                                    std::atomic<uint64_t>* moved_down) {
  using namespace asio::experimental::awaitable_operators;
  StreamRelayStats stats;
  bool failed = false;
  HalfCloseBound bound(downstream, upstream, half_close_timeout);
  co_await (pump(downstream, upstream, buffer_size, stats.downstream_to_upstream, stats.error,
                 failed, bound, moved_up) &&
            pump(upstream, downstream, buffer_size, stats.upstream_to_downstream, stats.error,
                 failed, bound, moved_down));
  stats.half_close_timed_out = bound.timed_out;
  co_return stats;
}

core::io::Awaitable<UpgradeOutcome> finish_upgrade(ByteStream& downstream, ByteStream& upstream,
                                                   std::chrono::nanoseconds half_close_timeout) {
  UpgradeOutcome out;
  core::http::Http1Parser parser(core::http::Http1Parser::Kind::Response, 1 << 20);
  std::vector<char> buf(64 * 1024);
  std::string passed;  // bytes of the answer read so far, passed through verbatim
  for (;;) {
    auto [ec, n] = co_await upstream.read_some(asio::buffer(buf));
    if (n > 0) {
      std::string_view data(buf.data(), n);
      auto r = parser.feed(data);
      if (r.status == core::http::Http1Parser::Status::Invalid) {
        out.error = "malformed upgrade response: " + parser.error();
        co_return out;
      }
      if (parser.head_ready()) {
        out.status = parser.head().status;
        // Verbatim pass-through: the head as received and anything after it.
        passed.append(data);
        auto [wec, w] = co_await downstream.write(asio::buffer(passed));
        passed.clear();
        if (wec) co_return out;
        if (out.status == 101 || r.status == core::http::Http1Parser::Status::MessageComplete) {
          break;
        }
        continue;
      }
      passed.append(data);
    }
    if (ec) {
      if (!parser.head_ready()) out.error = "error reading upgrade response: " + ec.message();
      co_return out;
    }
  }
  if (out.status != 101) {
    downstream.shutdown_send();
    co_return out;
  }
  std::vector<char>().swap(buf);  // not held for the upgraded connection's life
  out.relayed = co_await relay_streams(downstream, upstream, 64 * 1024, half_close_timeout);
  co_return out;
}

}  // namespace konn::kubeproxy
