#include "core/admin/admin_server.h"

#include <pthread.h>

#include <system_error>

#include <asio.hpp>

#include "core/http/http1_parser.h"
#include "core/io/asio_compat.h"
#include "core/log/log_macros.h"
#include "core/net/listener.h"

namespace konn::core::admin {
namespace {

constexpr size_t kMaxHead = 64 * 1024;
constexpr std::chrono::seconds kHeadTimeout(10);

const char* reason_of(int status) {
  switch (status) {
    case 200: return "OK";
    case 301: return "Moved Permanently";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

std::string render(const Response& r, bool head_only, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason_of(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  out += "X-Content-Type-Options: nosniff\r\n";
  if (!r.location.empty()) out += "Location: " + r.location + "\r\n";
  if (!keep_alive) out += "Connection: close\r\n";
  out += "\r\n";
  if (!head_only) out += r.body;
  return out;
}

}  // namespace

Response readiness(const std::vector<Check>& checks, bool verbose) {
  std::string list;
  bool ok = true;
  for (const auto& c : checks) {
    auto failure = c.run();
    if (failure) {
      ok = false;
      list += "[-]" + c.name + " failed: " + *failure + "\n";
    } else {
      list += "[+]" + c.name + " ok\n";
    }
  }
  Response r;
  if (ok) {
    r.body = verbose ? list + "readyz check passed\n" : "ok";
  } else {
    r.status = 503;
    r.body = list + "readyz check failed\n";
  }
  return r;
}

AdminServer::AdminServer(std::string name, std::string bind_address, uint16_t port)
    : name_(std::move(name)), bind_address_(std::move(bind_address)), port_(port),
      acceptor_(ctx_) {}

AdminServer::~AdminServer() { stop(); }

void AdminServer::route(const std::string& path, Handler handler) {
  routes_[path] = std::move(handler);
}

void AdminServer::route_async(const std::string& path, AsyncHandler handler) {
  async_routes_[path] = std::move(handler);
}

void AdminServer::start() {
  acceptor_ = net::listen_tcp(ctx_, bind_address_, port_);
  port_ = acceptor_.local_endpoint().port();
  accept();
  thread_ = std::thread([this] {
    // Named after the listener ("health", "admin"), as `top -H` and /proc/PID/task show it.
    pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
    ctx_.run();
  });
  KONN_LOG(log::get("admin"), info, "{} listening on {}:{}", name_,
           bind_address_.empty() ? "*" : bind_address_, port_);
}

bool AdminServer::start_unless_default_taken(bool port_given) {
  try {
    start();
    return true;
  } catch (const std::system_error& e) {
    if (port_given || e.code() != asio::error::address_in_use) throw;
    KONN_LOG(log::get("admin"), warn,
             "{}: {} and metrics are off (the default port is taken; --{}-port chooses another, "
             "-1 none)",
             e.what(), name_, name_);
    return false;
  }
}

void AdminServer::stop() {
  if (stopped_.exchange(true)) return;
  ctx_.stop();
  if (thread_.joinable()) thread_.join();
}

io::Awaitable<Response> AdminServer::dispatch(std::string method, std::string target) {
  if (method != "GET" && method != "HEAD") {
    co_return Response{405, "text/plain; charset=utf-8", "method not allowed\n", {}};
  }
  auto q = target.find('?');
  std::string path = target.substr(0, q);
  std::string query = q == std::string::npos ? "" : target.substr(q + 1);
  if (auto it = routes_.find(path); it != routes_.end()) co_return it->second(query);
  if (auto it = async_routes_.find(path); it != async_routes_.end()) {
    co_return co_await it->second(std::move(query));
  }
  co_return Response{404, "text/plain; charset=utf-8", "404 page not found\n", {}};
}

void AdminServer::accept() {
  acceptor_.async_accept([this](std::error_code ec, asio::ip::tcp::socket socket) {
    if (ec) {
      if (ec != asio::error::operation_aborted && !stopped_) accept();
      return;
    }
    asio::co_spawn(
        ctx_,
        [this, s = std::move(socket)]() mutable -> io::Awaitable<void> {
          using namespace asio::experimental::awaitable_operators;
          http::Http1Parser parser(http::Http1Parser::Kind::Request, kMaxHead);
          std::string buf(16 * 1024, '\0');
          for (;;) {
            asio::steady_timer deadline(s.get_executor(), kHeadTimeout);
            bool complete = false;
            while (!complete) {
              auto r = co_await (s.async_read_some(asio::buffer(buf), io::use_nothrow) ||
                                 deadline.async_wait(io::use_nothrow));
              if (r.index() == 1) co_return;  // slow client: drop it
              auto [rec, n] = std::get<0>(r);
              if (rec) co_return;
              auto res = parser.feed(std::string_view(buf.data(), n));
              if (res.status == http::Http1Parser::Status::Invalid) {
                Response bad{parser.error_status(), "text/plain; charset=utf-8",
                             parser.error() + "\n", {}};
                co_await asio::async_write(s, asio::buffer(render(bad, false, false)),
                                           io::use_nothrow);
                co_return;
              }
              complete = res.status == http::Http1Parser::Status::MessageComplete;
            }
            const auto& head = parser.head();
            Response rsp = co_await dispatch(head.method, head.target);
            bool keep = head.keep_alive;
            auto [wec, w] = co_await asio::async_write(
                s, asio::buffer(render(rsp, head.method == "HEAD", keep)), io::use_nothrow);
            if (wec || !keep) co_return;
            parser.reset();
          }
        },
        asio::detached);
    accept();
  });
}

}  // namespace konn::core::admin
