// relay_tcp(): the data phase of CONNECT and BIND sessions.

#include <algorithm>
#include <functional>
#include <optional>
#include <tuple>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include "core/log/log_macros.h"
#include "core/relay/relay.h"
#include "socks5/session_internal.h"
#include "socks5/splice_relay.h"

namespace konn::socks5::detail {
namespace {

using asio::ip::tcp;

// A socket (or a Konnectivity tunnel) as core::relay sees it, noting when each read or write
// starts so that the idle watchdog knows the relay is moving. A read starts right after the
// previous chunk was written, so "last start" is "last byte moved" for every direction that
// carries traffic.
template <typename Socket = tcp::socket>
class ActiveSocket {
 public:
  using executor_type = typename Socket::executor_type;
  // `direction`: what the bytes read from this socket count as in Activity::moved.
  ActiveSocket(Socket& s, Activity& a, int direction) : s_(s), a_(a), direction_(direction) {}
  executor_type get_executor() { return s_.get_executor(); }
  // core::relay awaits it with core::io::use_nothrow; the bytes read are counted live.
  template <typename Buffers, typename Token>
  core::io::Awaitable<std::tuple<std::error_code, size_t>> async_read_some(const Buffers& b,
                                                                           Token&& /*token*/) {
    a_.touch();
    auto [ec, n] = co_await s_.async_read_some(b, core::io::use_nothrow);
    a_.count(direction_, n);
    co_return std::tuple<std::error_code, size_t>{ec, n};
  }
  template <typename Buffers, typename Token>
  auto async_write_some(const Buffers& b, Token&& token) {
    a_.touch();
    return s_.async_write_some(b, std::forward<Token>(token));
  }
  void close(std::error_code& ec) { s_.close(ec); }
  // core::relay shuts down the send side when the other direction ended at EOF.
  void shutdown(asio::socket_base::shutdown_type what, std::error_code& ec) {
    s_.shutdown(what, ec);
    a_.side_finished();
  }

 private:
  Socket& s_;
  Activity& a_;
  int direction_;
};

// Closes both sockets once nothing moved for `idle` (--idle-timeout), or, once one direction
// ended at EOF, for `half_close` (--half-close-timeout) when that is shorter: a peer that never
// finishes its side must not hold the session for good. Zero turns either off. A plain timer
// callback rather than a coroutine joined with `&&`: an idle session then costs one timer, not
// extra coroutine frames (a few KiB per session). Lives in relay_tcp's frame; stop() and one trip
// through the executor guarantee no callback touches it afterwards.
class IdleWatch {
 public:
  using Clock = std::chrono::steady_clock;
  IdleWatch(const asio::any_io_executor& ex, std::function<void()> close_both, Activity& activity,
            std::chrono::nanoseconds idle, std::chrono::nanoseconds half_close, SessionInfo& info)
      : timer_(ex),
        close_both_(std::move(close_both)),
        activity_(activity),
        limit_(idle.count() > 0 ? std::chrono::duration_cast<Clock::duration>(idle)
                                : Clock::duration::max()),
        half_close_(std::chrono::duration_cast<Clock::duration>(half_close)),
        info_(info) {
    activity_.on_one_side_finished = [this] { one_side_finished(); };
  }

  void arm() {
    if (limit_ == Clock::duration::max()) return;  // nothing to bound (yet)
    timer_.expires_at(activity_.last + limit_);
    uint64_t generation = ++generation_;
    timer_.async_wait([this, generation](std::error_code ec) {
      if (ec || stopped_ || generation != generation_) return;
      if (Clock::now() - activity_.last >= limit_) {
        info_.reason = activity_.one_side_finished ? "half-close timeout" : "idle timeout";
        close_both_();
        return;
      }
      arm();
    });
  }

  // The first direction ended at EOF: from now on the half-close limit applies, when shorter.
  void one_side_finished() {
    if (half_close_.count() <= 0 || half_close_ >= limit_) return;
    limit_ = half_close_;
    activity_.touch();
    arm();  // an older wait (a longer deadline) is left to end as stale
  }

  // After this, a pending callback only sees `stopped_`; the caller then lets the executor run
  // once (every callback of this timer is queued by then) before destroying the watch.
  void stop() {
    stopped_ = true;
    timer_.cancel();
  }

 private:
  asio::steady_timer timer_;
  std::function<void()> close_both_;
  Activity& activity_;
  Clock::duration limit_;
  Clock::duration half_close_;
  SessionInfo& info_;
  bool stopped_ = false;
  uint64_t generation_ = 0;  // of the wait that counts
};

void finish_stats(const core::relay::RelayStats& stats, SessionInfo& info) {
  info.bytes_up += stats.downstream_to_upstream;
  info.bytes_down += stats.upstream_to_downstream;
  if (info.reason == "done") {
    if (stats.downstream_error) {
      info.reason = "client: " + stats.downstream_error.message();
    } else if (stats.upstream_error) {
      info.reason = "upstream: " + stats.upstream_error.message();
    }
  }
}

// A relay direction left splice(2) for the buffered copy: once per session, with the reason.
void note_splice_fallback(int err, SessionInfo& info) {
  if (err == 0) return;
  static auto log = core::log::get("socks5.relay");
  KONN_CONN_LOG(log, warn, info, "splice(2) unsupported ({}): relaying through buffers instead",
                std::error_code(err, std::generic_category()).message());
  if (info.metrics != nullptr) info.metrics->splice_fallback();
}

void count_live(Activity& activity, SessionInfo& info) {
  if (info.live == nullptr) return;
  activity.moved[0] = &info.live->bytes_up;
  activity.moved[1] = &info.live->bytes_down;
}

template <typename Upstream>
std::function<void()> closer(tcp::socket& client, Upstream& upstream) {
  return [&client, &upstream] {
    std::error_code ignored;
    client.close(ignored);
    upstream.close(ignored);
  };
}

}  // namespace

core::io::Awaitable<void> relay_tunnel(tcp::socket& client, core::konnectivity::Tunnel& tunnel,
                                       const Socks5Options& options, SessionInfo& info) {
  Activity activity;
  count_live(activity, info);
  std::optional<IdleWatch> watch;
  if (options.idle_timeout > std::chrono::nanoseconds::zero() ||
      options.half_close_timeout > std::chrono::nanoseconds::zero()) {
    watch.emplace(client.get_executor(), closer(client, tunnel), activity, options.idle_timeout,
                  options.half_close_timeout, info);
    watch->arm();
  }
  core::relay::RelayStats stats;
  if (auto* unix_socket = tunnel.unix_socket(); unix_socket != nullptr && options.splice) {
    int fallback = 0;
    stats = co_await splice_relay(client, *unix_socket, activity,
                                  static_cast<size_t>(options.splice_pipe_bytes), &fallback);
    note_splice_fallback(fallback, info);
  } else {
    // gRPC DATA packets are as large as the reads that fill them: at least 64 KiB.
    constexpr size_t kTunnelBuffer = 64 * 1024;
    ActiveSocket a(client, activity, 0);
    ActiveSocket<core::konnectivity::Tunnel> b(tunnel, activity, 1);
    stats = co_await core::relay::relay(
        a, b, std::max(kTunnelBuffer, static_cast<size_t>(options.buffer_size)));
  }
  if (watch) {
    watch->stop();
    co_await asio::post(client.get_executor(), asio::use_awaitable);
  }
  finish_stats(stats, info);
}

core::io::Awaitable<void> relay_tcp(tcp::socket& client, tcp::socket& upstream,
                                    const Socks5Options& options, SessionInfo& info) {
  Activity activity;
  count_live(activity, info);
  std::optional<IdleWatch> watch;
  if (options.idle_timeout > std::chrono::nanoseconds::zero() ||
      options.half_close_timeout > std::chrono::nanoseconds::zero()) {
    watch.emplace(client.get_executor(), closer(client, upstream), activity, options.idle_timeout,
                  options.half_close_timeout, info);
    watch->arm();
  }
  core::relay::RelayStats stats;
  if (options.splice) {
    int fallback = 0;
    stats = co_await splice_relay(client, upstream, activity,
                                  static_cast<size_t>(options.splice_pipe_bytes), &fallback);
    note_splice_fallback(fallback, info);
  } else {
    ActiveSocket a(client, activity, 0);
    ActiveSocket b(upstream, activity, 1);
    stats = co_await core::relay::relay(a, b, static_cast<size_t>(options.buffer_size));
  }
  if (watch) {
    watch->stop();
    // Let an already-queued timer callback run (and see `stopped`) while the watch is alive.
    co_await asio::post(client.get_executor(), asio::use_awaitable);
  }
  finish_stats(stats, info);
}

}  // namespace konn::socks5::detail
