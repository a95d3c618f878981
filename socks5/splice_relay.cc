#include "socks5/splice_relay.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fcntl.h>
#include <unistd.h>
#include <vector>

#include <asio/write.hpp>

namespace konn::socks5 {
namespace {

using asio::ip::tcp;

// Empty pipes on this thread, reused so that a short connection, or a direction that goes quiet
// and wakes again, costs no pipe2/fcntl/close (splice's price in connections per second).
// Bounded by count and by capacity: the kernel charges every pipe's capacity to its user
// (fs.pipe-user-pages-soft, 64 MiB by default), and an unprivileged user over that limit gets
// 8 KiB pipes.
struct PipeCache {
  static constexpr size_t kMax = 64;
  static constexpr size_t kMaxBytes = 8 * 1024 * 1024;
  size_t bytes = 0;
  struct Entry {
    int rd, wr;
    size_t bytes;
  };
  std::vector<Entry> free;
  ~PipeCache() {
    for (auto& e : free) {
      ::close(e.rd);
      ::close(e.wr);
    }
  }
};
thread_local PipeCache pipe_cache;

// A pipe's two ends. Returned to the cache when known empty (`reusable`), else closed.
struct Pipe {
  int rd = -1;
  int wr = -1;
  size_t bytes = 0;
  bool reusable = false;
  ~Pipe() { release(); }
  // Gives the pipe back (to the cache when known empty, else closes it).
  void release() {
    if (rd < 0) return;
    auto& c = pipe_cache;
    if (reusable && c.free.size() < PipeCache::kMax && c.bytes + bytes <= PipeCache::kMaxBytes) {
      c.free.push_back({rd, wr, bytes});
      c.bytes += bytes;
    } else {
      ::close(rd);
      ::close(wr);
    }
    rd = wr = -1;
    reusable = false;
  }
  bool open(size_t size) {
    auto& c = pipe_cache;
    if (!c.free.empty() && c.free.back().bytes == size) {
      rd = c.free.back().rd;
      wr = c.free.back().wr;
      bytes = size;
      c.bytes -= size;
      c.free.pop_back();
      return true;
    }
    int fds[2];
    if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return false;
    rd = fds[0];
    wr = fds[1];
    bytes = size;
    // Ask for a pipe sized to our chunk (the default is 64 KiB).
    ::fcntl(wr, F_SETPIPE_SZ, static_cast<int>(size));
    return true;
  }
};

std::atomic<SpliceFunction> splice_function{nullptr};

ssize_t call_splice(int in, int out, size_t len, unsigned flags) {
  if (auto f = splice_function.load(std::memory_order_relaxed); f != nullptr) {
    return f(in, nullptr, out, nullptr, len, flags);
  }
  return ::splice(in, nullptr, out, nullptr, len, flags);
}

// splice(2) cannot be used on this pair of descriptors (as opposed to an I/O error).
bool unsupported(int err) { return err == EINVAL || err == ENOSYS; }

// The buffer of a direction that left splice: bounded like the buffered relay's, one chunk in
// flight (read, then write, then read).
constexpr size_t kFallbackChunk = 64 * 1024;

// The buffered copy a direction continues with once splice is unsupported: same contract as
// the pump (bytes counted, activity touched, EOF ends the direction, an error is reported).
template <typename From, typename To>
core::io::Awaitable<void> copy_buffered(From& from, To& to, std::vector<char>& buf, uint64_t& bytes,
                                        std::error_code& error, Activity& activity, int direction) {
  for (;;) {
    auto [ec, n] = co_await from.async_read_some(asio::buffer(buf), core::io::use_nothrow);
    if (ec == asio::error::eof) co_return;
    if (ec) {
      error = ec;
      co_return;
    }
    activity.touch();
    auto [wec, m] =
        co_await asio::async_write(to, asio::buffer(buf.data(), n), core::io::use_nothrow);
    bytes += m;
    activity.count(direction, m);
    if (wec) {
      error = wec;
      co_return;
    }
    activity.touch();
  }
}

// Writes the `in_pipe` bytes left in `pipe` (pipe → socket splice unsupported) the ordinary way.
template <typename To>
core::io::Awaitable<void> drain_pipe_buffered(Pipe& pipe, size_t in_pipe, To& to,
                                              std::vector<char>& buf, uint64_t& bytes,
                                              std::error_code& error, Activity& activity,
                                              int direction) {
  while (in_pipe > 0) {
    // The bytes are in the pipe already: the read does not wait.
    ssize_t r = ::read(pipe.rd, buf.data(), std::min(in_pipe, buf.size()));
    if (r <= 0) {
      error = std::error_code(r < 0 ? errno : EPIPE, std::generic_category());
      co_return;
    }
    auto [ec, m] = co_await asio::async_write(to, asio::buffer(buf.data(), static_cast<size_t>(r)),
                                              core::io::use_nothrow);
    bytes += m;
    activity.count(direction, m);
    if (ec) {
      error = ec;
      co_return;
    }
    in_pipe -= static_cast<size_t>(r);
    activity.touch();
  }
}

template <typename From, typename To>
core::io::Awaitable<void> pump(From& from, To& to, size_t pipe_bytes, uint64_t& bytes,
                               std::error_code& error, bool& failed, Activity& activity,
                               int& fallback_errno, int direction) {
  Pipe pipe;
  constexpr unsigned kFlags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;
  auto fill = [&]() {
    ssize_t n = call_splice(from.native_handle(), pipe.wr, pipe_bytes, kFlags);
    return std::pair<ssize_t, int>(n, n < 0 ? errno : 0);
  };
  size_t in_pipe = 0;
  bool buffered = false;  // splice is unsupported here: go on with the buffered copy
  while (!failed) {
    // Fill the pipe from the source (only when it is empty: one chunk in flight, like the
    // buffered relay's read-then-write).
    auto [n, err] = pipe.rd >= 0 ? fill() : std::pair<ssize_t, int>(-1, EAGAIN);
    if (n < 0 && err == EAGAIN) {
      // The source is quiet and the pipe is empty: hand the pipe back while we wait, so a
      // session holds one only while bytes are in flight (an idle session holds none).
      pipe.reusable = true;
      pipe.release();
      auto [ec] = co_await from.async_wait(asio::socket_base::wait_read, core::io::use_nothrow);
      if (failed) break;  // the other direction failed and closed both sockets meanwhile
      if (ec) {
        error = ec;
        break;
      }
      if (pipe.rd < 0 && !pipe.open(pipe_bytes)) {
        error = std::error_code(errno, std::generic_category());
        break;
      }
      std::tie(n, err) = fill();
      if (n < 0 && (err == EAGAIN || err == EINTR)) continue;
    }
    if (n == 0) break;  // EOF, and the pipe is empty
    if (n < 0) {
      if (err == EINTR) continue;
      if (unsupported(err)) {
        // Nothing was taken from the source: the buffered copy starts where splice stopped.
        fallback_errno = err;
        buffered = true;
        break;
      }
      error = std::error_code(err, std::generic_category());
      break;
    }
    in_pipe = static_cast<size_t>(n);
    activity.touch();
    // Drain the pipe into the destination, waiting whenever its send buffer is full.
    while (in_pipe > 0) {
      ssize_t m = call_splice(pipe.rd, to.native_handle(), in_pipe, kFlags);
      if (m > 0) {
        in_pipe -= static_cast<size_t>(m);
        bytes += static_cast<uint64_t>(m);
        activity.count(direction, static_cast<uint64_t>(m));
        activity.touch();
        continue;
      }
      int werr = m < 0 ? errno : EPIPE;
      if (werr == EINTR) continue;
      if (unsupported(werr)) {
        // `in_pipe` bytes wait in the pipe: the buffered copy writes them first.
        fallback_errno = werr;
        buffered = true;
        break;
      }
      if (werr != EAGAIN) {
        error = std::error_code(werr, std::generic_category());
        break;
      }
      auto [ec] = co_await to.async_wait(asio::socket_base::wait_write, core::io::use_nothrow);
      if (failed) break;
      if (ec) {
        error = ec;
        break;
      }
    }
    if (error || buffered) break;
  }
  if (buffered && !failed) {
    std::vector<char> buf(std::min(pipe_bytes, kFallbackChunk));
    co_await drain_pipe_buffered(pipe, in_pipe, to, buf, bytes, error, activity, direction);
    in_pipe = 0;
    if (!error) co_await copy_buffered(from, to, buf, bytes, error, activity, direction);
  }
  // Every chunk was drained before the next fill, so the pipe is empty unless we stopped on an
  // error in the middle of a drain.
  pipe.reusable = !error && in_pipe == 0;
  pipe.release();
  std::error_code ignored;
  if (error) {
    failed = true;
    from.close(ignored);
    to.close(ignored);
  } else if (!failed) {
    to.shutdown(asio::socket_base::shutdown_send, ignored);
    activity.side_finished();
  }
}

}  // namespace

template <typename Upstream>
core::io::Awaitable<core::relay::RelayStats> splice_relay(tcp::socket& downstream,
                                                          Upstream& upstream, Activity& activity,
                                                          size_t pipe_bytes, int* fallback_errno) {
  using namespace asio::experimental::awaitable_operators;
  std::error_code ignored;
  downstream.native_non_blocking(true, ignored);
  upstream.native_non_blocking(true, ignored);
  core::relay::RelayStats stats;
  bool failed = false;
  int up_fallback = 0;
  int down_fallback = 0;
  co_await (pump(downstream, upstream, pipe_bytes, stats.downstream_to_upstream,
                 stats.downstream_error, failed, activity, up_fallback, 0) &&
            pump(upstream, downstream, pipe_bytes, stats.upstream_to_downstream,
                 stats.upstream_error, failed, activity, down_fallback, 1));
  if (fallback_errno != nullptr) *fallback_errno = up_fallback != 0 ? up_fallback : down_fallback;
  co_return stats;
}

void set_splice_function_for_testing(SpliceFunction f) {
  splice_function.store(f, std::memory_order_relaxed);
}

template core::io::Awaitable<core::relay::RelayStats> splice_relay(tcp::socket&, tcp::socket&,
                                                                   Activity&, size_t, int*);
template core::io::Awaitable<core::relay::RelayStats> splice_relay(
    tcp::socket&, asio::local::stream_protocol::socket&, Activity&, size_t, int*);

}  // namespace konn::socks5
