#include "proxy-agent/server_connector.h"

#include <array>
#include <functional>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <asio/ssl.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "core/config/duration.h"
#include "core/error/errc.h"
#include "core/http/http1_parser.h"
#include "core/http/http1_writer.h"
#include "core/net/dialer.h"
#include "core/net/endpoint.h"
#include "core/tls/pem.h"
#include "core/tls/tls_context.h"

namespace konn::agent {
namespace {

using core::io::use_nothrow;

// A proxy's answer to CONNECT is a status line and a few headers.
constexpr size_t kMaxConnectReplyHead = 16 * 1024;

// The deadline of one attempt. When it passes, `close` closes whatever socket the attempt holds
// at that moment, so the pending operation ends with an error and the attempt sees `expired`.
struct Deadline {
  explicit Deadline(const asio::any_io_executor& ex) : timer(ex) {}
  asio::steady_timer timer;
  std::function<void()> close;  // empty while no socket is held
  bool expired = false;
};

// One attempt, under a Deadline that connect_server() owns.
class Attempt {
 public:
  Attempt(asio::any_io_executor ex, ServerConnectTarget t, Deadline& deadline)
      : ex_(std::move(ex)), t_(std::move(t)), deadline_(deadline), target_(t_.address()) {}

  core::io::Awaitable<ServerConnectResult> run() {
    if (!t_.tls) co_return failed("no TLS context for " + target_);
    const std::string first_hop = t_.proxy ? t_.proxy->address() : target_;
    auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline_.timer.expiry() - std::chrono::steady_clock::now());
    auto dialed = co_await core::net::dial_tcp(ex_, first_hop,
                                               std::max(remaining, std::chrono::milliseconds(1)));
    if (deadline_.expired || dialed.ec == konn::Errc::DialTimeout) {
      co_return timed_out("connecting to " + first_hop);
    }
    if (dialed.ec) {
      ServerConnectResult r;
      r.error = dialed.error_text;
      if (t_.proxy) {
        const auto& cat = dialed.ec.category();
        r.proxy_failure = ProxyFailure::unreachable(cat == asio::error::get_netdb_category() ||
                                                    cat == asio::error::get_addrinfo_category());
      }
      co_return r;
    }
    asio::ip::tcp::socket socket = std::move(dialed.socket);
    deadline_.close = [&socket] {
      std::error_code ignored;
      socket.close(ignored);
    };
    if (t_.proxy) {
      auto failed = co_await connect_through_proxy(socket);
      if (failed) co_return std::move(*failed);
    }
    co_return co_await handshake(std::move(socket));
  }

 private:
  // CONNECT target_ HTTP/1.1 on `socket`, connected to the proxy. nullopt once the proxy answered
  // 2xx; the failure otherwise.
  core::io::Awaitable<std::optional<ServerConnectResult>> connect_through_proxy(
      asio::ip::tcp::socket& socket) {
    core::http::Headers headers{{"Host", target_}};
    if (t_.proxy->has_credentials) {
      headers.emplace_back("Proxy-Authorization", t_.proxy->authorization());
    }
    const std::string request = core::http::write_request_head("CONNECT", target_, headers);
    auto [we, wn] = co_await asio::async_write(socket, asio::buffer(request), use_nothrow);
    if (deadline_.expired) co_return timed_out("sending CONNECT " + target_ + " to the proxy");
    if (we) {
      co_return proxy_other("the proxy closed the connection",
                            "CONNECT " + target_ + ": " + we.message());
    }
    core::http::Http1Parser parser(core::http::Http1Parser::Kind::Response, kMaxConnectReplyHead);
    // The answer has no body when it is 2xx (the tunnel starts right after the head), and the
    // body of a refusal does not matter: the head is all this reads.
    parser.expect_no_body(true);
    std::array<char, 4096> buf{};
    size_t after_head = 0;
    while (!parser.head_ready()) {
      auto [re, n] = co_await socket.async_read_some(asio::buffer(buf), use_nothrow);
      if (deadline_.expired) {
        co_return timed_out("waiting for the proxy's answer to CONNECT " + target_);
      }
      if (re) {
        co_return proxy_other("the proxy closed the connection without answering the CONNECT",
                              "CONNECT " + target_ + ": " +
                                  (re == asio::error::eof ? "end of stream" : re.message()));
      }
      auto fed = parser.feed(std::string_view(buf.data(), n));
      if (fed.status == core::http::Http1Parser::Status::Invalid) {
        co_return proxy_other("the proxy's answer to the CONNECT is not HTTP",
                              "CONNECT " + target_ + ": " + parser.error());
      }
      if (parser.head_ready()) after_head = n - fed.consumed;
    }
    const auto& head = parser.head();
    if (head.status < 200 || head.status > 299) {
      ServerConnectResult r;
      r.error = "CONNECT " + target_ + ": the proxy answered " + std::to_string(head.status) +
                (head.reason.empty() ? "" : " " + head.reason);
      r.proxy_failure = ProxyFailure::for_status(*t_.proxy, head.status);
      co_return r;
    }
    if (after_head != 0) {
      // TLS starts with the client's hello, so nothing of the server can come before it.
      co_return proxy_other("the proxy sent bytes after its answer to the CONNECT",
                            "CONNECT " + target_ + ": " + std::to_string(after_head) +
                                " bytes after the proxy's " + std::to_string(head.status) +
                                " answer, before TLS began");
    }
    co_return std::nullopt;
  }

  // TLS on `socket` (to the server, or a tunnel to it): SNI and name check against t_.host, ALPN
  // "h2" through the transport's own handshake.
  core::io::Awaitable<ServerConnectResult> handshake(asio::ip::tcp::socket socket) {
    auto transport = std::make_unique<core::h2::TcpTlsTransport>(std::move(socket), *t_.tls);
    if (!core::tls::prepare_client(transport->native_handle(), t_.host, true)) {
      co_return failed("TLS: cannot use the server name \"" + t_.host + "\"");
    }
    if (!t_.alpn.empty() && !transport->offer_alpn(t_.alpn)) {
      // validate() refuses ids OpenSSL cannot send: this does not happen.
      co_return failed("TLS: OpenSSL refused the --alpn-proto list");
    }
    deadline_.close = [tp = transport.get()] { tp->close(); };
    if (deadline_.expired) co_return timed_out("TLS handshake with " + target_);
    auto [ec] = co_await asio::async_initiate<decltype(use_nothrow), void(std::error_code)>(
        [tp = transport.get()](auto handler) {
          // The transport takes a copyable std::function; the coroutine's handler is move-only.
          auto h = std::make_shared<std::decay_t<decltype(handler)>>(std::move(handler));
          tp->async_handshake(false, [h](std::error_code e) { std::move (*h)(e); });
        },
        use_nothrow);
    deadline_.close = nullptr;
    if (deadline_.expired) co_return timed_out("TLS handshake with " + target_);
    if (ec == std::errc::protocol_not_supported) {
      co_return failed("no HTTP/2 (ALPN h2) from " + target_);
    }
    if (ec) {
      const long verify = SSL_get_verify_result(transport->native_handle());
      if (verify != X509_V_OK) {
        co_return failed("TLS handshake with " + target_ + ": certificate verify failed (" +
                         X509_verify_cert_error_string(verify) + ")");
      }
      co_return failed("TLS handshake with " + target_ + ": " + ec.message());
    }
    ServerConnectResult r;
    r.transport = std::move(transport);
    co_return r;
  }

  ServerConnectResult timed_out(const std::string& during) const {
    const std::string after = core::config::format_go_duration(
        std::chrono::duration_cast<core::config::Duration>(t_.timeout));
    ServerConnectResult r;
    r.error = "timed out after " + after + " (" + during + ")";
    if (t_.proxy) r.proxy_failure = ProxyFailure::timed_out(after);
    return r;
  }

  // A failure past the proxy (TLS, HTTP/2): counted as Other through a proxy, with no words.
  ServerConnectResult failed(std::string error) const {
    ServerConnectResult r;
    r.error = std::move(error);
    if (t_.proxy) r.proxy_failure = ProxyFailure{ProxyFailure::Other, {}};
    return r;
  }

  static ServerConnectResult proxy_other(std::string text, std::string error) {
    ServerConnectResult r;
    r.error = std::move(error);
    r.proxy_failure = ProxyFailure{ProxyFailure::Other, std::move(text)};
    return r;
  }

  asio::any_io_executor ex_;
  ServerConnectTarget t_;
  Deadline& deadline_;
  std::string target_;  // host:port of the server
};

}  // namespace

std::string ServerConnectTarget::address() const {
  return core::net::HostPort{host, static_cast<uint16_t>(port)}.to_string();
}

core::io::Awaitable<ServerConnectResult> connect_server(asio::any_io_executor ex,
                                                        ServerConnectTarget t) {
  // Shared with the timer's handler, which may run (cancelled) after this frame is gone.
  auto deadline = std::make_shared<Deadline>(ex);
  deadline->timer.expires_after(t.timeout);
  deadline->timer.async_wait([deadline](std::error_code ec) {
    if (ec) return;
    deadline->expired = true;
    if (deadline->close) deadline->close();
  });
  Attempt attempt(ex, std::move(t), *deadline);
  ServerConnectResult r = co_await attempt.run();
  deadline->close = nullptr;
  deadline->timer.cancel();
  co_return r;
}

std::shared_ptr<asio::ssl::context> make_server_client_context(const std::string& ca_cert,
                                                               const std::string& agent_cert,
                                                               const std::string& agent_key) {
  core::tls::ClientTlsConfig config;
  // read_pem names the file it cannot read.
  if (!ca_cert.empty()) config.ca_pem = core::tls::read_pem(ca_cert);
  const bool client_cert = !agent_cert.empty() && !agent_key.empty();
  if (client_cert) {
    config.cert_pem = core::tls::read_pem(agent_cert);
    config.key_pem = core::tls::read_pem(agent_key);
  }
  try {
    return core::tls::make_client_context(config);
  } catch (const std::runtime_error& e) {
    // make_client_context names the part ("certificate authority: ...", "client certificate:
    // ...", "client key ..."); add the file it came from.
    const std::string_view what = e.what();
    const std::string& file = what.rfind("certificate authority", 0) == 0 ? ca_cert
                              : what.rfind("client certificate", 0) == 0  ? agent_cert
                                                                          : agent_key;
    throw std::runtime_error(file + ": " + std::string(what));
  }
}

}  // namespace konn::agent
