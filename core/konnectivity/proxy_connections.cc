#include "core/konnectivity/proxy_connections.h"

#include <future>
#include <limits>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <openssl/x509.h>

#include "core/h2/transport.h"
#include "core/log/log_macros.h"
#include "core/net/dialer.h"
#include "core/net/endpoint.h"
#include "core/tls/tls_context.h"

namespace konn::core::konnectivity {

// One connection being made on a slot's thread; the dials that need it wait on `done`.
struct ProxyConnectionAttempt {
  explicit ProxyConnectionAttempt(const asio::any_io_executor& ex)
      : done(ex, std::chrono::steady_clock::time_point::max()) {}
  asio::steady_timer done;  // never expires: cancelled when the attempt ends, waking every waiter
  bool finished = false;
  std::string error;  // "" once connected
};

// One io thread's connection. Every member but `ex` and `ctx` is touched only on that thread
// (or by the destructor once that thread no longer runs the context).
struct ProxyConnections::Slot {
  Slot(asio::any_io_executor e, asio::io_context* c) : ex(std::move(e)), ctx(c) {}
  bool usable() const { return conn && !conn->closed(); }
  void close(const std::string& why) {
    closed = true;
    if (auto c = std::move(conn)) c->close(why);
  }

  const asio::any_io_executor ex;
  asio::io_context* const ctx;  // null when the executor's context is not an io_context
  std::shared_ptr<h2::Connection> conn;
  std::shared_ptr<ProxyConnectionAttempt> attempt;  // a connection being made
  bool closed = false;                              // the owner is gone: no new connection
};

namespace {

using namespace asio::experimental::awaitable_operators;
using Unix = asio::local::stream_protocol;
using Clock = std::chrono::steady_clock;

const std::shared_ptr<spdlog::logger>& connections_logger() {
  static auto log = core::log::get("konnectivity");
  return log;
}

std::string describe_where(const FrontendAddress& a) {
  if (!a.unix_path.empty()) return "unix:" + a.unix_path;
  return net::HostPort{a.host, a.port}.to_string();
}

// Waits for a TLS transport's handshake (the transport takes a copyable callback; the
// coroutine's handler is move-only).
io::Awaitable<std::error_code> handshake(h2::TcpTlsTransport& t) {
  auto [ec] = co_await asio::async_initiate<decltype(io::use_nothrow), void(std::error_code)>(
      [&t](auto handler) {
        auto h = std::make_shared<std::decay_t<decltype(handler)>>(std::move(handler));
        t.async_handshake(false, [h](std::error_code e) { std::move (*h)(e); });
      },
      io::use_nothrow);
  co_return ec;
}

// Connects to the frontend within the address's connect timeout: a unix socket, or TCP (with
// TCP_NODELAY) and the TLS handshake (peer name checked, ALPN h2). Null with `error` set on
// failure.
io::Awaitable<std::unique_ptr<h2::Transport>> open_transport(
    const std::shared_ptr<ProxyConnections::Shared>& shared, asio::any_io_executor ex,
    std::string& error) {
  const FrontendAddress& a = shared->address;
  const auto timeout = a.connect_timeout;
  if (!a.unix_path.empty()) {
    Unix::socket s(ex);
    asio::steady_timer timer(ex, timeout);
    auto r = co_await (s.async_connect(Unix::endpoint(a.unix_path), io::use_nothrow) ||
                       timer.async_wait(io::use_nothrow));
    if (r.index() == 1) {
      error = "connect to proxy-server " + shared->where + ": timed out";
      co_return nullptr;
    }
    if (auto [ec] = std::get<0>(r); ec) {
      error = "connect to proxy-server " + shared->where + ": " + ec.message();
      co_return nullptr;
    }
    co_return std::make_unique<h2::UnixTransport>(std::move(s));
  }
  const auto until = Clock::now() + timeout;
  auto d = co_await net::dial_tcp(ex, shared->where, timeout);
  if (d.ec) {
    error = "proxy-server: " + d.error_text;
    co_return nullptr;
  }
  auto t = std::make_unique<h2::TcpTlsTransport>(std::move(d.socket), *a.tls);
  if (!tls::prepare_client(t->native_handle(), a.server_name, true)) {
    error = "proxy-server: cannot verify name " + a.server_name;
    co_return nullptr;
  }
  // The rest of the timeout bounds the handshake: when it passes, the socket is closed under it.
  struct Watch {
    explicit Watch(const asio::any_io_executor& e) : timer(e) {}
    asio::steady_timer timer;
    h2::Transport* transport = nullptr;  // null once the handshake ended
    bool expired = false;
  };
  auto watch = std::make_shared<Watch>(ex);
  watch->transport = t.get();
  watch->timer.expires_at(until);
  watch->timer.async_wait([watch](std::error_code ec) {
    if (ec || watch->transport == nullptr) return;
    watch->expired = true;
    watch->transport->close();
  });
  const std::error_code ec = co_await handshake(*t);
  watch->transport = nullptr;
  watch->timer.cancel();
  if (watch->expired) {
    error = "TLS handshake with proxy-server " + shared->where + ": timed out";
    co_return nullptr;
  }
  if (ec == std::errc::protocol_not_supported) {
    error = "no HTTP/2 (ALPN h2) from proxy-server " + shared->where;
    co_return nullptr;
  }
  if (ec) {
    const long verify = SSL_get_verify_result(t->native_handle());
    error = "TLS handshake with proxy-server " + shared->where + ": " +
            (verify != X509_V_OK ? std::string("certificate verify failed (") +
                                       X509_verify_cert_error_string(verify) + ")"
                                 : ec.message());
    co_return nullptr;
  }
  co_return t;
}

// Makes the slot's connection, then wakes the dials that wait for it. Holds what it uses, so it
// may finish after the ProxyConnections is gone (a closed slot then gets no connection).
io::Awaitable<void> run_attempt(std::shared_ptr<ProxyConnections::Shared> shared,
                                std::shared_ptr<ProxyConnections::Slot> slot,
                                std::shared_ptr<ProxyConnectionAttempt> attempt) {
  std::string error;
  std::unique_ptr<h2::Transport> transport = co_await open_transport(shared, slot->ex, error);
  if (transport && slot->closed) {
    transport->close();
    transport.reset();
    error = "the dialer is shutting down";
  }
  if (transport) {
    auto conn =
        h2::Connection::create(h2::Connection::Role::Client, std::move(transport), shared->options);
    conn->start();
    slot->conn = std::move(conn);
    shared->connections_made.fetch_add(1);
    KONN_LOG(connections_logger(), debug, "connected to the proxy-server {}", shared->where);
  } else {
    KONN_LOG(connections_logger(), debug, "no connection to the proxy-server {}: {}", shared->where,
             error);
  }
  attempt->error = std::move(error);
  attempt->finished = true;
  if (slot->attempt == attempt) slot->attempt.reset();
  attempt->done.cancel();
}

// Connects the slot, or joins the attempt under way: "" once it has a usable connection.
io::Awaitable<std::string> connect(const std::shared_ptr<ProxyConnections::Shared>& shared,
                                   const std::shared_ptr<ProxyConnections::Slot>& slot,
                                   Clock::time_point deadline, bool& timed_out) {
  if (slot->closed) co_return "the dialer is shutting down";
  if (!slot->attempt) {
    slot->attempt = std::make_shared<ProxyConnectionAttempt>(slot->ex);
    asio::co_spawn(slot->ex, run_attempt(shared, slot, slot->attempt), asio::detached);
  }
  const auto attempt = slot->attempt;
  asio::steady_timer timer(co_await asio::this_coro::executor, deadline);
  while (!attempt->finished) {
    auto r =
        co_await (attempt->done.async_wait(io::use_nothrow) || timer.async_wait(io::use_nothrow));
    if (r.index() == 1 && !attempt->finished) {
      timed_out = true;
      co_return "no connection to the proxy-server " + shared->where + " within the dial timeout";
    }
  }
  if (!attempt->error.empty()) co_return attempt->error;
  if (!slot->usable()) co_return "the connection to the proxy-server " + shared->where + " closed";
  co_return "";
}

}  // namespace

ProxyConnections::ProxyConnections(FrontendAddress address) : shared_(std::make_shared<Shared>()) {
  shared_->where = describe_where(address);
  h2::ConnectionOptions& o = shared_->options;
  if (!address.unix_path.empty()) {
    o.authority = "localhost";  // what gRPC clients send for a unix: target
    o.scheme = "http";
  } else {
    o.authority = address.server_name.empty() ? shared_->where : address.server_name;
    o.scheme = "https";
  }
  o.user_agent = "konn";
  o.max_message_bytes = kMaxMessageBytes;
  // Each tunnel's stream window (1 MiB, given back as its reader takes the bytes) bounds what the
  // proxy-server may send it; a connection window as well would let a few tunnels whose readers
  // stopped hold up every other tunnel of the connection.
  o.connection_window = std::numeric_limits<int32_t>::max();
  o.log_name = "[konnectivity h2 " + shared_->where + "]";
  shared_->address = std::move(address);
}

ProxyConnections::~ProxyConnections() {
  decltype(slots_) slots;
  {
    std::lock_guard lock(mu_);
    slots.swap(slots_);
  }
  for (auto& [key, slot] : slots) {
    auto close = [slot = slot] { slot->close("the dialer is shutting down"); };
    if (slot->ctx != nullptr &&
        (slot->ctx->stopped() || slot->ctx->get_executor().running_in_this_thread())) {
      close();  // nothing else runs that context now
      continue;
    }
    auto done = std::make_shared<std::promise<void>>();
    auto closed = done->get_future();
    asio::post(slot->ex, [close, done] {
      close();
      done->set_value();
    });
    if (closed.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
      KONN_LOG(connections_logger(), warn,
               "the connection to the proxy-server {} was not closed: its thread does not run",
               shared_->where);
    }
  }
}

std::shared_ptr<ProxyConnections::Slot> ProxyConnections::slot_for(
    const asio::any_io_executor& ex) {
  auto& ctx = asio::query(ex, asio::execution::context);
  std::lock_guard lock(mu_);
  auto& slot = slots_[&ctx];
  if (!slot) {
    // An io_context's executor: its context is that io_context.
    const bool io = ex.target<asio::io_context::executor_type>() != nullptr;
    slot = std::make_shared<Slot>(ex, io ? static_cast<asio::io_context*>(&ctx) : nullptr);
  }
  return slot;
}

io::Awaitable<ProxyConnections::Call> ProxyConnections::start_call(h2::StreamCallbacks callbacks,
                                                                   Clock::time_point deadline,
                                                                   std::string first) {
  auto slot = slot_for(co_await asio::this_coro::executor);
  Call out;
  for (int tries = 0; tries < 2; ++tries) {
    if (!slot->usable()) {
      out.error = co_await connect(shared_, slot, deadline, out.timed_out);
      if (!out.error.empty()) co_return out;
    }
    h2::StreamCallbacks cb = callbacks;
    cb.on_end = [shared = shared_, end = callbacks.on_end](const h2::GrpcStatus& status,
                                                           const h2::Metadata& trailers) {
      shared->open_calls.fetch_sub(1);
      if (end) end(status, trailers);
    };
    shared_->open_calls.fetch_add(1);  // before the call starts: its end may come at once
    {
      // Headers and first message in one write (one wake-up of the proxy-server, not two).
      h2::WriteHold hold(slot->conn);
      out.stream = slot->conn->start_call(kProxyPath, {}, std::move(cb));
      if (out.stream) out.stream->send_framed(std::move(first));
    }
    if (out.stream) co_return out;
    shared_->open_calls.fetch_sub(1);
    // Closed, or the proxy-server sent GOAWAY: the calls on it go on; new ones need a new one.
    slot->conn.reset();
  }
  out.error = "the connection to the proxy-server " + shared_->where + " ended";
  co_return out;
}

}  // namespace konn::core::konnectivity
