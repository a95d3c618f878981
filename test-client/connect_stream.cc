#include "test-client/connect_stream.h"

#include <condition_variable>
#include <deque>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <asio/local/stream_protocol.hpp>
#include <asio/ssl.hpp>

#include "core/http/http1_parser.h"
#include "core/http/http1_writer.h"
#include "core/io/asio_compat.h"
#include "core/net/dialer.h"
#include "core/tls/pem.h"
#include "core/tls/tls_context.h"

namespace konn::testclient {
namespace {

using core::io::Awaitable;
using core::io::use_nothrow;
using unix_socket = asio::local::stream_protocol::socket;
using tls_stream = asio::ssl::stream<asio::ip::tcp::socket>;
using IoResult = std::tuple<std::error_code, size_t>;

// Largest reply head accepted from the server.
constexpr size_t kMaxReplyHead = 64 * 1024;

std::string read_pem(const std::string& path, const char* what) {
  if (path.empty()) return {};
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in) throw std::runtime_error(std::string("cannot read ") + what + " " + path);
  return ss.str();
}

std::string status_line(const core::http::MessageHead& h) {
  std::string line = "HTTP/" + std::to_string(h.version_major) + "." +
                     std::to_string(h.version_minor) + " " + std::to_string(h.status);
  if (!h.reason.empty()) line += " " + h.reason;
  return line;
}

std::string trim_trailing_space(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// The one implementation of ConnectStream: the connection (a unix socket or a TLS stream over
// TCP) lives on a private io_context run by one thread. The read loop queues received bytes in an
// inbox; write() and close() post their work to the io_context and wait for it.
class Connection final : public ConnectStream {
 public:
  Connection() : work_(asio::make_work_guard(ctx_)), wake_(ctx_), deadline_(ctx_) {
    thread_ = std::thread([this] { ctx_.run(); });
  }

  ~Connection() override {
    close(std::chrono::milliseconds(0));
    work_.reset();
    if (thread_.joinable()) thread_.join();
  }

  // Runs the whole dial on the io thread and waits for it.
  DialResult dial(const ChannelConfig& frontend, const std::string& address,
                  std::chrono::milliseconds timeout) {
    std::promise<void> done;
    DialResult result;
    asio::co_spawn(ctx_, establish(frontend, address, timeout, &result),
                   [&done, &result](const std::exception_ptr& e) {
                     if (e) result.error = "dial failed: unexpected exception";
                     done.set_value();
                   });
    done.get_future().wait();
    return result;
  }

  bool tls() const override { return tls_ != nullptr; }

  bool write(std::string_view bytes) override {
    std::lock_guard wl(write_mu_);
    {
      std::lock_guard lock(mu_);
      if (closed_ || write_failed_ || write_closed_) return false;
    }
    std::promise<std::error_code> done;
    asio::post(ctx_, [this, bytes, &done] {
      auto handler = [&done](std::error_code ec, size_t) { done.set_value(ec); };
      if (tls_) {
        asio::async_write(*tls_, asio::buffer(bytes), handler);
      } else {
        asio::async_write(*unix_, asio::buffer(bytes), handler);
      }
    });
    std::error_code ec = done.get_future().get();
    if (ec) {
      std::lock_guard lock(mu_);
      write_failed_ = true;
      return false;
    }
    return true;
  }

  bool close_write() override {
    if (tls_) return false;  // see the class comment
    std::lock_guard wl(write_mu_);
    {
      std::lock_guard lock(mu_);
      if (closed_ || write_closed_) return false;
      write_closed_ = true;
    }
    std::promise<void> done;
    asio::post(ctx_, [this, &done] {
      std::error_code ignored;
      unix_->shutdown(asio::socket_base::shutdown_send, ignored);
      done.set_value();
    });
    done.get_future().wait();
    return true;
  }

  std::optional<std::string> read() override {
    std::string out;
    if (read_for(&out, std::chrono::milliseconds::max()) == ReadStatus::Data) return out;
    return std::nullopt;
  }

  ReadStatus read_for(std::string* out, std::chrono::milliseconds timeout) override {
    bool wake = false;
    {
      std::unique_lock lock(mu_);
      auto ready = [&] { return !inbox_.empty() || ended_ || closed_; };
      if (timeout == std::chrono::milliseconds::max()) {
        cv_.wait(lock, ready);
      } else if (!cv_.wait_for(lock, timeout, ready)) {
        return ReadStatus::Timeout;
      }
      if (inbox_.empty()) return ReadStatus::Eof;
      *out = std::move(inbox_.front());
      inbox_.pop_front();
      inbox_bytes_ -= out->size();
      if (reader_paused_ && inbox_bytes_ <= kInboxLimit / 2) {
        reader_paused_ = false;
        wake = true;
      }
    }
    if (wake) asio::post(ctx_, [this] { wake_.cancel(); });
    return ReadStatus::Data;
  }

  std::string close(std::chrono::milliseconds /*timeout*/) override {
    {
      std::lock_guard lock(mu_);
      if (closed_) return ended_ ? end_reason_ : std::string();
      closed_ = true;
      inbox_.clear();
      inbox_bytes_ = 0;
    }
    cv_.notify_all();
    // Closing the socket aborts a blocked write and the read loop.
    std::promise<void> done;
    asio::post(ctx_, [this, &done] {
      closing_ = true;
      close_socket();
      wake_.cancel();
      done.set_value();
    });
    done.get_future().wait();
    std::lock_guard lock(mu_);
    return ended_ ? end_reason_ : std::string();
  }

  bool ended() const override {
    std::lock_guard lock(mu_);
    return ended_;
  }

  std::string end_reason() const override {
    std::lock_guard lock(mu_);
    return end_reason_;
  }

 private:
  // Connects, sends CONNECT and reads the reply (on the io thread). On success starts the read
  // loop; otherwise `out->error` says why.
  Awaitable<void> establish(ChannelConfig frontend, std::string address,
                            std::chrono::milliseconds timeout, DialResult* out) {
    deadline_.expires_after(timeout);
    deadline_.async_wait([this](std::error_code ec) {
      if (ec) return;
      timed_out_ = true;
      close_socket();
    });
    std::string error = co_await open(frontend, timeout);
    if (error.empty()) {
      std::string head = core::http::write_request_head(
          "CONNECT", address, {{"Host", address}, {"User-Agent", "proxy-test-client"}});
      asio::const_buffer request = asio::buffer(head);
      auto [ec, n] = co_await write_all(request);
      if (ec) error = "sending CONNECT: " + ec.message();
    }
    if (error.empty()) error = co_await read_reply(out);
    deadline_.cancel();
    if (timed_out_) {
      error = "no reply to CONNECT within " + std::to_string(timeout.count()) + "ms";
    }
    if (!error.empty()) {
      out->error = std::move(error);
      close_socket();
      co_return;
    }
    asio::co_spawn(ctx_, read_loop(), asio::detached);
  }

  // Connects to the frontend: the unix socket, or TCP plus the TLS handshake.
  Awaitable<std::string> open(const ChannelConfig& fe, std::chrono::milliseconds timeout) {
    if (!fe.uds_path.empty()) {
      unix_ = std::make_unique<unix_socket>(ctx_);
      asio::local::stream_protocol::endpoint ep;
      try {
        ep = asio::local::stream_protocol::endpoint(fe.uds_path);
      } catch (const std::system_error& e) {
        co_return "connect unix " + fe.uds_path + ": " + e.code().message();
      }
      auto [ec] = co_await unix_->async_connect(ep, use_nothrow);
      if (ec) co_return "connect unix " + fe.uds_path + ": " + ec.message();
      co_return std::string();
    }
    try {
      core::tls::ClientTlsConfig cfg;
      cfg.ca_pem = read_pem(fe.ca_cert, "--ca-cert");
      cfg.cert_pem = read_pem(fe.client_cert, "--client-cert");
      cfg.key_pem = read_pem(fe.client_key, "--client-key");
      ssl_ctx_ = core::tls::make_client_context(cfg);
    } catch (const std::exception& e) {
      co_return std::string(e.what());
    }
    std::string host = fe.host;
    if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
    std::string target = host + ":" + std::to_string(fe.port);
    auto dialed = co_await core::net::dial_tcp(ctx_.get_executor(), target, timeout);
    if (dialed.ec) co_return dialed.error_text;
    tls_ = std::make_unique<tls_stream>(std::move(dialed.socket), *ssl_ctx_);
    if (timed_out_) co_return std::string();  // reported by establish()
    if (!core::tls::prepare_client(tls_->native_handle(), fe.host, true)) {
      co_return "TLS: cannot use server name " + fe.host;
    }
    auto [ec] = co_await tls_->async_handshake(asio::ssl::stream_base::client, use_nothrow);
    if (ec) co_return "TLS handshake with " + target + ": " + ec.message();
    co_return std::string();
  }

  // Reads the reply head. 200: the bytes after it are the destination's and go to the inbox.
  // Anything else: reads the reply's body too (bounded) and returns status line and body.
  Awaitable<std::string> read_reply(DialResult* out) {
    core::http::Http1Parser head_parser(core::http::Http1Parser::Kind::Response, kMaxReplyHead);
    // A 2xx reply to CONNECT has no body whatever its headers say (RFC 9110 9.3.6), and the
    // parser must stop right after the head: what follows belongs to the destination.
    head_parser.expect_no_body(true);
    std::string received;  // the reply so far, to parse an error reply's body afterwards
    std::string buf(16 * 1024, '\0');
    for (;;) {
      auto [ec, n] = co_await read_some(asio::buffer(buf));
      if (n > 0) {
        std::string_view data(buf.data(), n);
        received.append(data);
        auto r = head_parser.feed(data);
        if (r.status == core::http::Http1Parser::Status::Invalid) {
          co_return "bad reply to CONNECT: " + head_parser.error();
        }
        if (r.status == core::http::Http1Parser::Status::MessageComplete) {
          out->status = head_parser.head().status;
          if (out->status != 200) break;
          std::string_view rest = data.substr(r.consumed);
          if (!rest.empty()) {
            std::lock_guard lock(mu_);
            inbox_.emplace_back(rest);
            inbox_bytes_ += rest.size();
          }
          co_return std::string();
        }
      }
      if (ec) {
        if (timed_out_) co_return std::string();  // reported by establish()
        co_return "connection closed before the reply to CONNECT (" + ec.message() + ")";
      }
    }
    std::string line = status_line(head_parser.head());
    co_return co_await read_error_body(std::move(line), std::move(received));
  }

  // The body of a refused CONNECT, parsed from the start of `received` on (framed by
  // Content-Length, chunks, or the connection's end).
  Awaitable<std::string> read_error_body(std::string line, std::string received) {
    core::http::Http1Parser parser(core::http::Http1Parser::Kind::Response, kMaxReplyHead);
    std::string body;
    std::string buf(16 * 1024, '\0');
    std::string_view data = received;
    for (;;) {
      auto r = parser.feed(data);
      for (auto piece : r.body) body.append(piece.substr(0, kMaxErrorBody - body.size()));
      if (r.status != core::http::Http1Parser::Status::NeedMore || body.size() >= kMaxErrorBody) {
        break;
      }
      auto [ec, n] = co_await read_some(asio::buffer(buf));
      data = std::string_view(buf.data(), n);
      if (ec && n == 0) {
        parser.finish();
        break;
      }
    }
    body = trim_trailing_space(std::move(body));
    co_return body.empty() ? line : line + ": " + body;
  }

  // Moves the destination's bytes into the inbox until the connection ends, pausing while the
  // inbox is full.
  Awaitable<void> read_loop() {
    for (;;) {
      bool pause;
      {
        std::lock_guard lock(mu_);
        pause = inbox_bytes_ >= kInboxLimit;
        reader_paused_ = pause;
      }
      if (closing_) co_return;
      if (pause) {
        wake_.expires_at(std::chrono::steady_clock::time_point::max());
        co_await wake_.async_wait(use_nothrow);
        continue;
      }
      std::string chunk(kReadChunk, '\0');
      auto [ec, n] = co_await read_some(asio::buffer(chunk));
      {
        std::lock_guard lock(mu_);
        if (n > 0 && !closed_) {
          chunk.resize(n);
          inbox_bytes_ += n;
          inbox_.push_back(std::move(chunk));
        }
        if (ec) {
          ended_ = true;
          // A TLS peer that closes without close_notify gives stream_truncated: still an end.
          bool clean =
              ec == asio::error::eof || ec == asio::ssl::error::stream_truncated || closing_;
          if (!clean) end_reason_ = "connection: " + ec.message();
        }
      }
      cv_.notify_all();
      if (ec) co_return;
    }
  }

  Awaitable<IoResult> read_some(asio::mutable_buffer b) {
    if (tls_) co_return co_await tls_->async_read_some(b, use_nothrow);
    co_return co_await unix_->async_read_some(b, use_nothrow);
  }

  Awaitable<IoResult> write_all(asio::const_buffer b) {
    if (tls_) co_return co_await asio::async_write(*tls_, b, use_nothrow);
    co_return co_await asio::async_write(*unix_, b, use_nothrow);
  }

  // On the io thread.
  void close_socket() {
    std::error_code ignored;
    if (tls_) {
      tls_->lowest_layer().shutdown(asio::socket_base::shutdown_both, ignored);
      tls_->lowest_layer().close(ignored);
    } else if (unix_) {
      unix_->shutdown(asio::socket_base::shutdown_both, ignored);
      unix_->close(ignored);
    }
  }

  asio::io_context ctx_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::shared_ptr<asio::ssl::context> ssl_ctx_;
  std::unique_ptr<unix_socket> unix_;  // one of the two is set by open()
  std::unique_ptr<tls_stream> tls_;
  asio::steady_timer wake_;      // the read loop waits on it while the inbox is full
  asio::steady_timer deadline_;  // bounds the dial
  // Touched on the io thread only.
  bool timed_out_ = false;
  bool closing_ = false;

  std::mutex write_mu_;  // one writer at a time

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::deque<std::string> inbox_;
  size_t inbox_bytes_ = 0;
  bool reader_paused_ = false;
  bool ended_ = false;         // the far side closed, or the connection broke
  std::string end_reason_;     // "" for a clean end
  bool closed_ = false;        // close() was called
  bool write_failed_ = false;  // a write failed: later ones fail at once
  bool write_closed_ = false;  // close_write() shut our side down

  std::thread thread_;  // last: it starts once everything above exists
};

}  // namespace

ConnectStream::DialResult ConnectStream::dial(const ChannelConfig& frontend,
                                              const std::string& address,
                                              std::chrono::milliseconds timeout) {
  auto conn = std::make_unique<Connection>();
  DialResult result = conn->dial(frontend, address, timeout);
  if (result.error.empty()) result.stream = std::move(conn);
  return result;
}

}  // namespace konn::testclient
