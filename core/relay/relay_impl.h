#pragma once

// Template bodies of relay.h.

#include <memory>

namespace konn::core::relay::detail {

template <typename From, typename To>
io::Awaitable<void> pump(From& from, To& to, size_t buffer_size, uint64_t& bytes,
                         std::error_code& error, bool& failed) {
  std::unique_ptr<char[]> buf(new char[buffer_size]);
  for (;;) {
    auto [rec, n] = co_await from.async_read_some(asio::buffer(buf.get(), buffer_size),
                                                  io::use_nothrow);
    if (n > 0) {
      auto [wec, w] = co_await asio::async_write(to, asio::buffer(buf.get(), n), io::use_nothrow);
      bytes += w;
      if (wec) {
        error = wec;
        break;
      }
    }
    if (rec) {
      if (rec != asio::error::eof) error = rec;
      break;
    }
  }
  std::error_code ignored;
  if (error) {
    // A reset or failure on one side ends the session: wake the other direction too.
    failed = true;
    from.close(ignored);
    to.close(ignored);
  } else if (!failed) {
    to.shutdown(asio::socket_base::shutdown_send, ignored);
  }
}

}  // namespace konn::core::relay::detail

namespace konn::core::relay {

template <typename A, typename B>
io::Awaitable<RelayStats> relay(A& downstream, B& upstream, size_t buffer_size) {
  using namespace asio::experimental::awaitable_operators;
  RelayStats stats;
  bool failed = false;
  co_await (detail::pump(downstream, upstream, buffer_size, stats.downstream_to_upstream,
                         stats.downstream_error, failed) &&
            detail::pump(upstream, downstream, buffer_size, stats.upstream_to_downstream,
                         stats.upstream_error, failed));
  co_return stats;
}

}  // namespace konn::core::relay
