#include "kubeproxy-http/connect_proxy.h"

#include <vector>

#include "core/config/duration.h"
#include "core/http/http1_parser.h"
#include "core/http/http1_writer.h"
#include "core/kube/kubeconfig.h"
#include "core/log/log_macros.h"
#include "core/net/endpoint.h"
#include "kubeproxy-http/upgrade.h"
#include "kubeproxy-http/upstream_dialer.h"

namespace konn::kubeproxy {
namespace {

using core::http::Http1Parser;

core::http::Headers allow_connect() { return {{"Allow", "CONNECT"}}; }
core::http::Headers proxy_authenticate() {
  return {{"Proxy-Authenticate", "Basic realm=\"kubeproxy-http\""}};
}

}  // namespace

ConnectProxy::ConnectProxy(const KubeproxyOptions& options,
                           core::konnectivity::Dialer* konnectivity, KubeproxyMetrics* metrics)
    : options_(options),
      konnectivity_(konnectivity),
      metrics_(metrics),
      log_(core::log::get("kubeproxy.connect")) {
  for (const auto& p : options.allowed_destinations)
    allowed_.emplace_back(p, std::regex::ECMAScript);
  if (!options.proxy_user.empty()) {
    expected_auth_ = "Basic " + core::kube::encode_base64(options.proxy_user);
  }
}

bool ConnectProxy::allowed(const std::string& destination) const {
  if (allowed_.empty()) return true;
  for (const auto& re : allowed_) {
    if (std::regex_search(destination, re)) return true;
  }
  return false;
}

core::io::Awaitable<void> ConnectProxy::serve(ByteStream client, std::string peer,
                                              LiveConnection* live) {
  using namespace asio::experimental::awaitable_operators;
  Http1Parser parser(Http1Parser::Kind::Request, static_cast<size_t>(options_.max_header_bytes));
  std::vector<char> buf(64 * 1024);
  std::string rest;  // bytes after the head (the client's first tunnel bytes)
  // No timeout configured (0) means a deadline that never comes in practice.
  auto deadline = std::chrono::steady_clock::now() +
                  (options_.request_header_timeout.count() > 0
                       ? std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             options_.request_header_timeout)
                       : std::chrono::hours(24 * 365));
  std::string destination;  // once the target parsed
  auto reply = [&](int status, std::string body,
                   core::http::Headers extra = {}) -> core::io::Awaitable<void> {
    std::string resp = core::http::write_text_response(status, body, true, extra);
    if (metrics_ != nullptr) metrics_->response(status);
    if (tracker_ != nullptr) {
      // The request line as the client sent it (the target only: a CONNECT has no query), and
      // our own answer's text; never a header (Proxy-Authorization stays out).
      std::string reason = body;
      while (!reason.empty() && reason.back() == '\n') reason.pop_back();
      const auto& head = parser.head();
      tracker_->record_failure(
          {std::chrono::system_clock::now(), peer,
           head.method.empty() ? "-"
                               : head.method + " " + head.target.substr(0, head.target.find('?')),
           destination.empty() ? "-" : destination, status, std::move(reason)});
    }
    co_await client.write(asio::buffer(resp));
    if (options_.access_log) {
      log_->info("{} \"CONNECT {}\" {}", peer, parser.head().target, status);
    }
    client.close();
  };
  for (;;) {
    asio::steady_timer timer(client.get_executor(), deadline);
    auto r =
        co_await (client.read_some(asio::buffer(buf)) || timer.async_wait(core::io::use_nothrow));
    if (r.index() == 1) {
      if (!parser.idle()) co_await reply(408, std::string("Request Timeout\n"));
      client.close();
      co_return;
    }
    auto [ec, n] = std::get<0>(r);
    if (ec || n == 0) {
      client.close();
      co_return;
    }
    std::string_view data(buf.data(), n);
    auto res = parser.feed(data);
    if (res.status == Http1Parser::Status::Invalid) {
      int code = parser.error_status();
      co_await reply(code, std::string(core::http::reason_phrase(code)) + ": " + parser.error() +
                               std::string("\n"));
      co_return;
    }
    if (res.status == Http1Parser::Status::MessageComplete) {
      rest = std::string(data.substr(res.consumed));
      break;
    }
  }
  std::vector<char>().swap(buf);  // the head is read: a tunnel's life holds no read buffer
  const auto& h = parser.head();
  if (metrics_ != nullptr) metrics_->request("connect");
  if (h.method != "CONNECT") {
    co_await reply(405, std::string("Method Not Allowed: this proxy only supports CONNECT\n"),
                   allow_connect());
    co_return;
  }
  if (!expected_auth_.empty()) {
    const std::string* auth = h.find("Proxy-Authorization");
    if (auth == nullptr || *auth != expected_auth_) {
      co_await reply(407, std::string("Proxy Authentication Required\n"), proxy_authenticate());
      co_return;
    }
  }
  auto hp = core::net::parse_host_port(h.target);
  if (!hp || hp->host.empty() || hp->port == 0) {
    co_await reply(400, std::string("Bad Request: CONNECT target must be host:port\n"));
    co_return;
  }
  destination = hp->to_string();
  if (live != nullptr) {
    live->set("CONNECT " + destination, destination,
              konnectivity_ != nullptr ? "konnectivity" : "direct");
  }
  if (!allowed(destination)) {
    KONN_LOG(log_, info, "{}: CONNECT {} refused: not in --allowed-destinations", peer,
             destination);
    co_await reply(403, std::string("Forbidden: destination not allowed\n"));
    co_return;
  }
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options_.dial_timeout);
  std::unique_ptr<ByteStream> upstream;
  std::string early;  // destination bytes that came with the proxy-server's 200
  if (konnectivity_ != nullptr) {
    auto r = co_await konnectivity_->dial(destination, timeout);
    if (!r.tunnel) {
      KONN_LOG(log_, info, "{}: CONNECT {} through Konnectivity: {}", peer, destination,
               r.error.text);
      if (metrics_ != nullptr) {
        metrics_->dial_failure("konnectivity", core::konnectivity::to_string(r.error.failure));
      }
      std::string body = r.error.text + "\n";
      co_await reply(core::konnectivity::http_status_for(r.error), body);
      co_return;
    }
    early = std::move(r.tunnel->early_bytes());
    upstream = std::make_unique<ByteStream>(std::move(r.tunnel));
  } else {
    auto d = co_await UpstreamDialer::dial_plain(client.get_executor(), destination, timeout);
    if (!d.stream) {
      KONN_LOG(log_, info, "{}: CONNECT {}: {}", peer, destination, d.error);
      if (metrics_ != nullptr) {
        metrics_->dial_failure("direct", d.timeout ? "timeout"
                                                   : core::konnectivity::to_string(
                                                         core::konnectivity::classify(d.error)));
      }
      co_await reply(d.timeout ? 504 : 502, d.error + std::string("\n"));
      co_return;
    }
    upstream = std::move(d.stream);
  }
  static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection established\r\n\r\n";
  if (metrics_ != nullptr) metrics_->response(200);
  auto [wec, wn] = co_await client.write(asio::buffer(kEstablished));
  if (wec) co_return;
  if (!early.empty()) {
    auto [eec, en] = co_await client.write(asio::buffer(early));
    if (eec) co_return;
  }
  if (!rest.empty()) {
    auto [uec, un] = co_await upstream->write(asio::buffer(rest));
    if (uec) co_return;
  }
  if (options_.access_log) log_->info("{} \"CONNECT {}\" 200 established", peer, destination);
  auto start = std::chrono::steady_clock::now();
  if (live != nullptr) {
    live->requests.fetch_add(1, std::memory_order_relaxed);
    live->bytes_up.fetch_add(rest.size(), std::memory_order_relaxed);
    live->bytes_down.fetch_add(early.size(), std::memory_order_relaxed);
  }
  auto stats = co_await relay_streams(client, *upstream, 64 * 1024, options_.half_close_timeout,
                                      live != nullptr ? &live->bytes_up : nullptr,
                                      live != nullptr ? &live->bytes_down : nullptr);
  if (stats.half_close_timed_out) {
    KONN_LOG(log_, info,
             "{}: CONNECT {} closed: one side had finished and nothing moved for {} "
             "(--half-close-timeout)",
             peer, destination, core::config::format_go_duration(options_.half_close_timeout));
  }
  if (metrics_ != nullptr) {
    metrics_->bytes(stats.downstream_to_upstream + rest.size(),
                    stats.upstream_to_downstream + early.size());
  }
  if (options_.access_log) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    log_->info("{} \"CONNECT {}\" 200 up={} down={} {}ms", peer, destination,
               stats.downstream_to_upstream + rest.size(), stats.upstream_to_downstream,
               ms.count());
  }
  client.close();
  upstream->close();
}

}  // namespace konn::kubeproxy
