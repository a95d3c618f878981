#include "core/kube/api_watch.h"

#include <cctype>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <asio.hpp>
#include <asio/ssl.hpp>

#include "core/http/http1_parser.h"
#include "core/net/dialer.h"
#include "core/net/endpoint.h"
#include "core/tls/tls_context.h"

namespace konn::core::kube {
namespace {

using namespace asio::experimental::awaitable_operators;

constexpr size_t kMaxErrorBody = 1024 * 1024;

// A watch is silent for minutes when nothing changes: keepalive probes find a peer that vanished
// without a FIN (a node gone, a dropped NAT entry) in about a minute instead of never.
void keep_alive(asio::ip::tcp::socket& s) {
  int fd = s.native_handle();
  int on = 1, idle = 30, interval = 10, count = 3;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

}  // namespace

bool JsonDocumentSplitter::feed(std::string_view piece, std::vector<std::string>* out) {
  if (!error_.empty()) return false;
  for (char c : piece) {
    if (depth_ == 0) {
      if (std::isspace(static_cast<unsigned char>(c)) != 0) continue;
      if (c != '{') {
        error_ = "watch stream: expected a JSON object, got '" + std::string(1, c) + "'";
        return false;
      }
    }
    current_ += c;
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      if (--depth_ == 0) {
        out->push_back(std::move(current_));
        current_.clear();
      }
    }
    if (current_.size() > max_document_) {
      error_ = "watch stream: an event larger than " + std::to_string(max_document_) + " bytes";
      return false;
    }
  }
  return true;
}

io::Awaitable<WatchEnd> api_watch(asio::any_io_executor ex, const ApiTarget& target,
                                  const std::string& path, WatchHandler handler,
                                  std::chrono::milliseconds connect_timeout,
                                  std::chrono::milliseconds idle_timeout) {
  WatchEnd out;
  std::string host = net::HostPort{target.host, target.port}.to_string();
  std::string request = "GET " + target.path_prefix + path + " HTTP/1.1\r\nHost: " + host +
                        "\r\nUser-Agent: konn\r\nAccept: application/json\r\n"
                        "Connection: close\r\n";
  if (target.authorization) {
    std::string auth = target.authorization();
    if (!auth.empty()) request += "Authorization: " + auth + "\r\n";
  }
  request += "\r\n";
  auto no_answer = [&] {
    return "no answer from " + host + " within " + std::to_string(connect_timeout.count()) + "ms";
  };

  // A watch counts as one request against the client-side limit, as client-go's does.
  if (auto refused = co_await wait_for_rate_limit(ex, target, "GET " + path, connect_timeout);
      !refused.empty()) {
    out.error = std::move(refused);
    co_return out;
  }
  auto deadline = std::chrono::steady_clock::now() + connect_timeout;
  auto dialed = co_await net::dial_tcp(ex, host, connect_timeout);
  if (dialed.ec) {
    out.error = dialed.error_text;
    co_return out;
  }
  keep_alive(dialed.socket);
  asio::ssl::stream<asio::ip::tcp::socket> s(std::move(dialed.socket), *target.tls);
  std::string name = target.server_name.empty() ? target.host : target.server_name;
  if (!tls::prepare_client(s.native_handle(), name, target.verify)) {
    out.error = "TLS: cannot use server name \"" + name + "\"";
    co_return out;
  }
  asio::steady_timer timer(ex);
  timer.expires_at(deadline);
  auto shook = co_await (s.async_handshake(asio::ssl::stream_base::client, io::use_nothrow) ||
                         timer.async_wait(io::use_nothrow));
  if (shook.index() == 1) {
    out.error = no_answer();
    co_return out;
  }
  if (auto [hec] = std::get<0>(shook); hec) {
    out.error = "TLS handshake with " + host + ": " + hec.message();
    co_return out;
  }
  auto wrote = co_await (asio::async_write(s, asio::buffer(request), io::use_nothrow) ||
                         timer.async_wait(io::use_nothrow));
  if (wrote.index() == 1) {
    out.error = no_answer();
    co_return out;
  }
  if (auto [wec, w] = std::get<0>(wrote); wec) {
    out.error = "writing request: " + wec.message();
    co_return out;
  }

  http::Http1Parser parser(http::Http1Parser::Kind::Response);
  JsonDocumentSplitter splitter;
  std::vector<std::string> events;
  std::string buf(16 * 1024, '\0');
  bool answered = false;
  for (;;) {
    if (answered) {
      timer.expires_after(idle_timeout);
    } else {
      timer.expires_at(deadline);
    }
    auto read = co_await (s.async_read_some(asio::buffer(buf), io::use_nothrow) ||
                          timer.async_wait(io::use_nothrow));
    if (read.index() == 1) {
      out.error = answered ? "watch silent for " + std::to_string(idle_timeout.count()) + "ms"
                           : no_answer();
      break;
    }
    auto [rec, n] = std::get<0>(read);
    if (n > 0) {
      auto r = parser.feed(std::string_view(buf.data(), n));
      if (r.status == http::Http1Parser::Status::Invalid) {
        out.error = "bad answer: " + parser.error();
        break;
      }
      if (!answered && parser.head_ready()) {
        answered = true;
        out.status = parser.head().status;
        if (handler.on_answer) handler.on_answer(out.status);
      }
      bool stop = false;
      for (auto piece : r.body) {
        if (out.status != 200) {
          if (out.body.size() < kMaxErrorBody) out.body.append(piece);
          continue;
        }
        events.clear();
        bool ok = splitter.feed(piece, &events);
        for (const auto& event : events) {
          if (handler.on_event && !handler.on_event(event)) {
            out.error = "stopped by the caller";
            stop = true;
            break;
          }
        }
        if (!ok && !stop) {
          out.error = splitter.error();
          stop = true;
        }
        if (stop) break;
      }
      if (stop) break;
      if (r.status == http::Http1Parser::Status::MessageComplete) break;  // the apiserver's end
    }
    if (rec) {
      if (answered && parser.finish()) break;  // a body delimited by the end of the connection
      out.error =
          answered ? "watch stream cut: " + rec.message() : "reading answer: " + rec.message();
      break;
    }
  }
  std::error_code ignored;
  s.lowest_layer().close(ignored);
  co_return out;
}

}  // namespace konn::core::kube
