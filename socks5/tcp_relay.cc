// relay_tcp(): the data phase of CONNECT and BIND sessions.

#include <asio/steady_timer.hpp>

#include "core/relay/relay.h"
#include "socks5/session_internal.h"
#include "socks5/splice_relay.h"

namespace konn::socks5::detail {
namespace {

using asio::ip::tcp;

// A tcp::socket as core::relay sees it, noting when each read or write starts so that the idle
// watchdog knows the relay is moving. A read starts right after the previous chunk was written,
// so "last start" is "last byte moved" for every direction that carries traffic.
class ActiveSocket {
 public:
  using executor_type = tcp::socket::executor_type;
  ActiveSocket(tcp::socket& s, Activity& a) : s_(s), a_(a) {}
  executor_type get_executor() { return s_.get_executor(); }
  template <typename Buffers, typename Token>
  auto async_read_some(const Buffers& b, Token&& token) {
    a_.touch();
    return s_.async_read_some(b, std::forward<Token>(token));
  }
  template <typename Buffers, typename Token>
  auto async_write_some(const Buffers& b, Token&& token) {
    a_.touch();
    return s_.async_write_some(b, std::forward<Token>(token));
  }
  void close(std::error_code& ec) { s_.close(ec); }
  void shutdown(tcp::socket::shutdown_type what, std::error_code& ec) { s_.shutdown(what, ec); }

 private:
  tcp::socket& s_;
  Activity& a_;
};

// Closes both sockets once nothing moved for `idle`; returns when `stop` is cancelled.
core::io::Awaitable<void> idle_watchdog(asio::steady_timer& stop, tcp::socket& a, tcp::socket& b,
                                  Activity& activity, std::chrono::nanoseconds idle,
                                  SessionInfo& info) {
  for (;;) {
    stop.expires_at(activity.last + std::chrono::duration_cast<std::chrono::steady_clock::duration>(idle));
    auto [ec] = co_await stop.async_wait(core::io::use_nothrow);
    if (ec) co_return;  // the relay ended first
    if (std::chrono::steady_clock::now() - activity.last >= idle) {
      info.reason = "idle timeout";
      std::error_code ignored;
      a.close(ignored);
      b.close(ignored);
      co_return;
    }
  }
}

}  // namespace

core::io::Awaitable<void> relay_tcp(tcp::socket& client, tcp::socket& upstream,
                              const Socks5Options& options, SessionInfo& info) {
  using namespace asio::experimental::awaitable_operators;
  Activity activity;
  asio::steady_timer stop(client.get_executor());
  auto run = [&]() -> core::io::Awaitable<core::relay::RelayStats> {
    core::relay::RelayStats stats;
    if (options.splice) {
      stats = co_await splice_relay(client, upstream, activity,
                                    static_cast<size_t>(options.splice_pipe_bytes));
    } else {
      ActiveSocket a(client, activity);
      ActiveSocket b(upstream, activity);
      stats = co_await core::relay::relay(a, b, static_cast<size_t>(options.buffer_size));
    }
    stop.cancel();
    co_return stats;
  };
  core::relay::RelayStats stats;
  if (options.idle_timeout > std::chrono::nanoseconds::zero()) {
    stats = co_await (run() && idle_watchdog(stop, client, upstream, activity,
                                             options.idle_timeout, info));
  } else {
    stats = co_await run();
  }
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

}  // namespace konn::socks5::detail
