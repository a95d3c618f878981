#include "core/kube/api_client.h"

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <fmt/format.h>

#include "core/http/http1_parser.h"
#include "core/kube/kubeconfig.h"
#include "core/log/log_macros.h"
#include "core/log/logger.h"
#include "core/net/dialer.h"
#include "core/net/endpoint.h"
#include "core/tls/tls_context.h"

namespace konn::core::kube {
namespace {

using namespace asio::experimental::awaitable_operators;

constexpr size_t kMaxResponse = 4 * 1024 * 1024;

io::Awaitable<ApiResponse> exchange(asio::any_io_executor ex, const ApiTarget& target,
                                    std::string request, std::chrono::milliseconds timeout) {
  ApiResponse out;
  net::HostPort hp{target.host, target.port};
  auto dialed = co_await net::dial_tcp(ex, hp.to_string(), timeout);
  if (dialed.ec) {
    out.error = dialed.error_text;
    co_return out;
  }
  asio::ssl::stream<asio::ip::tcp::socket> s(std::move(dialed.socket), *target.tls);
  std::string name = target.server_name.empty() ? target.host : target.server_name;
  if (!tls::prepare_client(s.native_handle(), name, target.verify)) {
    out.error = "TLS: cannot use server name \"" + name + "\"";
    co_return out;
  }
  auto [hec] = co_await s.async_handshake(asio::ssl::stream_base::client, io::use_nothrow);
  if (hec) {
    out.error = "TLS handshake with " + hp.to_string() + ": " + hec.message();
    co_return out;
  }
  auto [wec, w] = co_await asio::async_write(s, asio::buffer(request), io::use_nothrow);
  if (wec) {
    out.error = "writing request: " + wec.message();
    co_return out;
  }
  http::Http1Parser parser(http::Http1Parser::Kind::Response);
  std::string buf(16 * 1024, '\0');
  for (;;) {
    auto [rec, n] = co_await s.async_read_some(asio::buffer(buf), io::use_nothrow);
    if (n > 0) {
      auto r = parser.feed(std::string_view(buf.data(), n));
      for (auto piece : r.body) out.body.append(piece);
      if (r.status == http::Http1Parser::Status::Invalid) {
        out.error = "bad response: " + parser.error();
        co_return out;
      }
      if (out.body.size() > kMaxResponse) {
        out.error = "response too large";
        co_return out;
      }
      if (r.status == http::Http1Parser::Status::MessageComplete) break;
    }
    if (rec) {
      if (parser.finish()) break;
      out.error = "reading response: " + rec.message();
      co_return out;
    }
  }
  out.status = parser.head().status;
  std::error_code ignored;
  s.lowest_layer().close(ignored);
  co_return out;
}

}  // namespace

std::string content_type_warning(const std::string& content_type, bool calls_apiserver) {
  if (!calls_apiserver || content_type == "application/json") return {};
  return "--kube-api-content-type=" + content_type +
         " is not used: konn's apiserver calls (TokenReview, Lease) always use application/json; "
         "set --kube-api-content-type=application/json to silence this";
}

ApiTarget api_target_from(const RestConfig& config) {
  if (config.scheme != "https") {
    throw std::runtime_error(config.source + ": server " + config.server + " is not https");
  }
  ApiTarget t;
  t.host = config.host;
  t.port = config.port;
  t.path_prefix = config.path;
  t.server_name = config.tls_server_name;
  t.verify = !config.insecure_skip_tls_verify;
  tls::ClientTlsConfig tls;
  tls.ca_pem = config.ca_pem;
  tls.insecure_skip_verify = config.insecure_skip_tls_verify;
  tls.cert_pem = config.client_cert_pem;
  tls.key_pem = config.client_key_pem;
  tls.alpn = {"http/1.1"};
  t.tls = tls::make_client_context(tls);
  auto owned = std::make_shared<RestConfig>(config);
  auto credentials = std::make_shared<CredentialSource>(*owned);
  t.authorization = [owned, credentials] { return credentials->current().authorization; };
  return t;
}

io::Awaitable<std::string> wait_for_rate_limit(asio::any_io_executor ex, const ApiTarget& target,
                                               const std::string& what,
                                               std::chrono::milliseconds& budget) {
  if (!target.limiter) co_return std::string();
  auto wait = target.limiter->reserve(budget);
  if (!wait) {
    co_return fmt::format(
        "client-side rate limit ({:g} requests/s, burst {}): no token within {}ms, request not "
        "sent",
        target.limiter->qps(), target.limiter->burst(), budget.count());
  }
  if (wait->count() > 0) {
    if (*wait >= std::chrono::seconds(1)) {
      KONN_LOG(log::get("kube"), info,
               "{}: waiting {}ms for client-side rate limit ({:g}/s, burst {})", what,
               std::chrono::duration_cast<std::chrono::milliseconds>(*wait).count(),
               target.limiter->qps(), target.limiter->burst());
    }
    asio::steady_timer pause(ex, *wait);
    co_await pause.async_wait(io::use_nothrow);
    budget -= std::chrono::duration_cast<std::chrono::milliseconds>(*wait);
    if (budget.count() <= 0) budget = std::chrono::milliseconds(1);
  }
  co_return std::string();
}

io::Awaitable<ApiResponse> api_request(asio::any_io_executor ex, const ApiTarget& target,
                                       const std::string& method, const std::string& path,
                                       const std::string& body, std::chrono::milliseconds timeout) {
  std::string host = net::HostPort{target.host, target.port}.to_string();
  std::string request = method + " " + target.path_prefix + path + " HTTP/1.1\r\nHost: " + host +
                        "\r\nUser-Agent: konn\r\nAccept: application/json\r\n"
                        "Connection: close\r\n";
  if (target.authorization) {
    std::string auth = target.authorization();
    if (!auth.empty()) request += "Authorization: " + auth + "\r\n";
  }
  if (!body.empty() || method == "POST" || method == "PUT") {
    request +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n" + body;
  if (auto refused = co_await wait_for_rate_limit(ex, target, method + " " + path, timeout);
      !refused.empty()) {
    ApiResponse out;
    out.error = std::move(refused);
    co_return out;
  }
  asio::steady_timer timer(ex, timeout);
  auto r = co_await (exchange(ex, target, std::move(request), timeout) ||
                     timer.async_wait(io::use_nothrow));
  if (r.index() == 1) {
    ApiResponse out;
    out.error = "no answer from " + host + " within " + std::to_string(timeout.count()) + "ms";
    co_return out;
  }
  co_return std::get<0>(std::move(r));
}

}  // namespace konn::core::kube
