#include "kubeproxy-http/upstream_dialer.h"

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <asio/read.hpp>
#include <asio/ssl.hpp>

#include "core/error/errc.h"
#include "core/http/http1_parser.h"
#include "core/http/http1_writer.h"
#include "core/kube/kubeconfig.h"
#include "core/net/dialer.h"
#include "core/net/endpoint.h"
#include "core/tls/tls_context.h"

namespace konn::kubeproxy {
namespace {

using core::io::use_nothrow;

struct ProxyUrl {
  std::string scheme;  // http, https, socks5
  std::string host_port;
  std::string host;
  std::string userinfo;  // "user:pass" or ""
};

std::optional<ProxyUrl> parse_proxy_url(const std::string& url) {
  ProxyUrl p;
  size_t sep = url.find("://");
  if (sep == std::string::npos) return std::nullopt;
  p.scheme = url.substr(0, sep);
  std::string rest = url.substr(sep + 3);
  rest = rest.substr(0, rest.find('/'));
  size_t at = rest.rfind('@');
  if (at != std::string::npos) {
    p.userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
  }
  uint16_t def = p.scheme == "https" ? 443 : p.scheme == "http" ? 80 : 1080;
  auto hp = core::net::parse_host_port(rest);
  if (!hp) hp = core::net::HostPort{rest, def};
  p.host = hp->host;
  p.host_port = hp->to_string();
  return p;
}

void set_keepalive(asio::ip::tcp::socket& s, std::chrono::seconds period) {
  std::error_code ignored;
  s.set_option(asio::socket_base::keep_alive(true), ignored);
  int secs = static_cast<int>(period.count());
  setsockopt(s.native_handle(), IPPROTO_TCP, TCP_KEEPIDLE, &secs, sizeof secs);
  setsockopt(s.native_handle(), IPPROTO_TCP, TCP_KEEPINTVL, &secs, sizeof secs);
}

// TLS client handshake on a stream not yet used, with SNI and name verification on `name`.
// Returns "" on success, else the reason (`timed_out` set when the deadline passed).
template <typename Stream>
core::io::Awaitable<std::string> handshake_on(Stream& tls, const std::string& name, bool verify,
                                              std::chrono::milliseconds timeout, bool& timed_out) {
  using namespace asio::experimental::awaitable_operators;
  if (!core::tls::prepare_client(tls.native_handle(), name, verify)) {
    co_return "tls: cannot use server name \"" + name + "\"";
  }
  asio::steady_timer timer(tls.get_executor(), timeout);
  auto r = co_await (tls.async_handshake(asio::ssl::stream_base::client, use_nothrow) ||
                     timer.async_wait(use_nothrow));
  if (r.index() == 1) {
    timed_out = true;
    co_return "net/http: TLS handshake timeout";
  }
  auto [ec] = std::get<0>(r);
  if (!ec) co_return "";
  std::string reason = ec.message();
  long vr = SSL_get_verify_result(tls.native_handle());
  if (vr != X509_V_OK) reason = std::string("x509: ") + X509_verify_cert_error_string(vr);
  co_return "tls: handshake with " + name + " failed: " + reason;
}

// TLS over a TCP connection.
core::io::Awaitable<UpstreamDialer::Outcome> handshake(asio::ssl::context& ctx,
                                                       asio::ip::tcp::socket tcp,
                                                       const std::string& name, bool verify,
                                                       std::chrono::milliseconds timeout) {
  UpstreamDialer::Outcome out;
  auto tls = std::make_unique<ByteStream::Tls>(std::move(tcp), ctx);
  out.error = co_await handshake_on(*tls, name, verify, timeout, out.timeout);
  if (out.error.empty()) out.stream = std::make_unique<ByteStream>(std::move(tls));
  co_return out;
}

// TLS inside the TLS connection to an https proxy (the CONNECT tunnel already established).
core::io::Awaitable<UpstreamDialer::Outcome> handshake_in_tls(
    asio::ssl::context& ctx, std::unique_ptr<ByteStream::Tls> outer, const std::string& name,
    bool verify, std::chrono::milliseconds timeout) {
  UpstreamDialer::Outcome out;
  auto both = std::make_unique<TlsInTls>(std::move(outer), ctx);
  out.error = co_await handshake_on(both->inner, name, verify, timeout, out.timeout);
  if (out.error.empty()) out.stream = std::make_unique<ByteStream>(std::move(both));
  co_return out;
}

}  // namespace

UpstreamDialer::UpstreamDialer(const RestConfig& rest, std::chrono::milliseconds timeout,
                               std::chrono::seconds keepalive)
    : rest_(rest), timeout_(timeout), keepalive_(keepalive) {
  if (rest.scheme == "https") {
    core::tls::ClientTlsConfig c;
    c.ca_pem = rest.ca_pem;
    c.insecure_skip_verify = rest.insecure_skip_tls_verify;
    c.cert_pem = rest.client_cert_pem;
    c.key_pem = rest.client_key_pem;
    c.alpn = {"http/1.1"};
    tls_ = core::tls::make_client_context(c);
  }
  if (!rest.proxy_url.empty()) {
    auto p = parse_proxy_url(rest.proxy_url);
    if (!p || (p->scheme != "http" && p->scheme != "https" && p->scheme != "socks5")) {
      throw std::runtime_error("proxy-url \"" + rest.proxy_url +
                               "\": want http://, https:// or socks5://host:port");
    }
    if (p->scheme == "https") {
      // As Go: the proxy's certificate is checked with the same roots as the apiserver's.
      core::tls::ClientTlsConfig c;
      c.ca_pem = rest.ca_pem;
      c.insecure_skip_verify = rest.insecure_skip_tls_verify;
      proxy_tls_ = core::tls::make_client_context(c);
    }
  }
}

core::io::Awaitable<UpstreamDialer::Outcome> UpstreamDialer::dial_plain(
    asio::any_io_executor ex, std::string address, std::chrono::milliseconds timeout) {
  Outcome out;
  auto r = co_await core::net::dial_tcp(ex, address, timeout);
  if (r.ec) {
    out.error = r.error_text;
    out.timeout = r.ec == konn::Errc::DialTimeout;
    co_return out;
  }
  out.stream = std::make_unique<ByteStream>(std::move(r.socket));
  co_return out;
}

std::shared_ptr<asio::ssl::context> UpstreamDialer::context_with_client_cert(
    const std::string& cert_pem, const std::string& key_pem) const {
  core::tls::ClientTlsConfig c;
  c.ca_pem = rest_.ca_pem;
  c.insecure_skip_verify = rest_.insecure_skip_tls_verify;
  c.cert_pem = cert_pem;
  c.key_pem = key_pem;
  c.alpn = {"http/1.1"};
  return core::tls::make_client_context(c);
}

core::io::Awaitable<UpstreamDialer::Outcome> UpstreamDialer::dial(
    asio::any_io_executor ex, std::shared_ptr<asio::ssl::context> tls) const {
  Outcome out;
  if (!tls) tls = tls_;
  if (!rest_.proxy_url.empty()) {
    out = co_await through_proxy(ex);
    if (!out.stream) co_return out;
  } else {
    auto r = co_await core::net::dial_tcp(ex, rest_.host_port(), timeout_);
    if (r.ec) {
      out.error = r.error_text;
      out.timeout = r.ec == konn::Errc::DialTimeout;
      co_return out;
    }
    out.stream = std::make_unique<ByteStream>(std::move(r.socket));
  }
  if (auto* tcp = out.stream->tcp(); tcp != nullptr && keepalive_.count() > 0) {
    set_keepalive(*tcp, keepalive_);
  }
  if (rest_.scheme != "https") co_return out;
  // TLS to the apiserver; through an https proxy inside the proxy's TLS session (as Go does).
  // `tls` is kept alive by this frame until the handshake ends; afterwards the SSL object holds
  // its own reference to the SSL_CTX (no callbacks live in the asio context).
  if (auto outer = out.stream->release_tls()) {
    co_return co_await handshake_in_tls(*tls, std::move(outer), rest_.tls_server_name,
                                        !rest_.insecure_skip_tls_verify, timeout_);
  }
  auto* plain = out.stream->tcp();
  if (plain == nullptr) {
    out.error = "tls: no TCP connection to layer TLS on";
    out.stream.reset();
    co_return out;
  }
  co_return co_await handshake(*tls, std::move(*plain), rest_.tls_server_name,
                               !rest_.insecure_skip_tls_verify, timeout_);
}

core::io::Awaitable<UpstreamDialer::Outcome> UpstreamDialer::through_proxy(
    asio::any_io_executor ex) const {
  Outcome out;
  auto proxy = *parse_proxy_url(rest_.proxy_url);
  auto r = co_await core::net::dial_tcp(ex, proxy.host_port, timeout_);
  if (r.ec) {
    out.error = "proxyconnect tcp: " + r.error_text;
    out.timeout = r.ec == konn::Errc::DialTimeout;
    co_return out;
  }
  asio::ip::tcp::socket sock = std::move(r.socket);
  std::string target = rest_.host_port();
  if (proxy.scheme == "socks5") {
    // RFC 1928: no-auth greeting (or user/pass when the URL has userinfo), CONNECT by name.
    bool with_auth = !proxy.userinfo.empty();
    std::string greet =
        with_auth ? std::string("\x05\x02\x00\x02", 4) : std::string("\x05\x01\x00", 3);
    auto [e1, n1] = co_await asio::async_write(sock, asio::buffer(greet), use_nothrow);
    std::array<unsigned char, 2> choice{};
    auto [e2, n2] = co_await asio::async_read(sock, asio::buffer(choice), use_nothrow);
    if (e1 || e2 || choice[0] != 5 || (choice[1] != 0 && choice[1] != 2)) {
      out.error = "socks connect tcp " + proxy.host_port + "->" + target + ": bad greeting reply";
      co_return out;
    }
    if (choice[1] == 2) {
      std::string user = proxy.userinfo.substr(0, proxy.userinfo.find(':'));
      std::string pass = proxy.userinfo.find(':') == std::string::npos
                             ? ""
                             : proxy.userinfo.substr(proxy.userinfo.find(':') + 1);
      std::string auth = "\x01" + std::string(1, static_cast<char>(user.size())) + user +
                         std::string(1, static_cast<char>(pass.size())) + pass;
      auto [e3, n3] = co_await asio::async_write(sock, asio::buffer(auth), use_nothrow);
      auto [e4, n4] = co_await asio::async_read(sock, asio::buffer(choice), use_nothrow);
      if (e3 || e4 || choice[1] != 0) {
        out.error = "socks connect tcp " + proxy.host_port + "->" + target +
                    ": username/password authentication failed";
        co_return out;
      }
    }
    std::string req("\x05\x01\x00\x03", 4);
    req.push_back(static_cast<char>(rest_.host.size()));
    req += rest_.host;
    req.push_back(static_cast<char>(rest_.port >> 8));
    req.push_back(static_cast<char>(rest_.port & 0xFF));
    auto [e5, n5] = co_await asio::async_write(sock, asio::buffer(req), use_nothrow);
    std::array<unsigned char, 4> head{};
    auto [e6, n6] = co_await asio::async_read(sock, asio::buffer(head), use_nothrow);
    if (e5 || e6 || head[0] != 5 || head[1] != 0) {
      out.error = "socks connect tcp " + proxy.host_port + "->" + target +
                  ": unknown error (reply " + std::to_string(e6 ? -1 : head[1]) + ")";
      co_return out;
    }
    size_t addr_len = head[3] == 1 ? 4 : head[3] == 4 ? 16 : 0;
    if (head[3] == 3) {
      std::array<unsigned char, 1> l{};
      co_await asio::async_read(sock, asio::buffer(l), use_nothrow);
      addr_len = l[0];
    }
    std::vector<char> rest(addr_len + 2);
    auto [e7, n7] = co_await asio::async_read(sock, asio::buffer(rest), use_nothrow);
    if (e7) {
      out.error = "socks connect: " + e7.message();
      co_return out;
    }
    out.stream = std::make_unique<ByteStream>(std::move(sock));
    co_return out;
  }

  // HTTP CONNECT, over TLS for an https proxy.
  std::unique_ptr<ByteStream> conn;
  if (proxy.scheme == "https") {
    auto h = co_await handshake(*proxy_tls_, std::move(sock), proxy.host,
                                !rest_.insecure_skip_tls_verify, timeout_);
    if (!h.stream) {
      h.error = "proxyconnect tcp: " + h.error;
      co_return h;
    }
    conn = std::move(h.stream);
  } else {
    conn = std::make_unique<ByteStream>(std::move(sock));
  }
  core::http::Headers headers{{"Host", target}, {"User-Agent", "kubeproxy-http"}};
  if (!proxy.userinfo.empty()) {
    headers.emplace_back("Proxy-Authorization",
                         "Basic " + core::kube::encode_base64(proxy.userinfo));
  }
  std::string head = core::http::write_request_head("CONNECT", target, headers);
  auto [we, wn] = co_await conn->write(asio::buffer(head));
  if (we) {
    out.error = "proxyconnect tcp: " + we.message();
    co_return out;
  }
  core::http::Http1Parser parser(core::http::Http1Parser::Kind::Response, 64 * 1024);
  parser.expect_no_body(true);
  std::array<char, 4096> buf{};
  for (;;) {
    // Read one byte at a time would be slow; the proxy sends nothing after its head before we
    // speak, so any read returns at most the head.
    auto [re, rn] = co_await conn->read_some(asio::buffer(buf));
    if (re) {
      out.error = "proxyconnect tcp: " + re.message();
      co_return out;
    }
    auto res = parser.feed(std::string_view(buf.data(), rn));
    if (res.status == core::http::Http1Parser::Status::Invalid) {
      out.error = "proxyconnect tcp: malformed response: " + parser.error();
      co_return out;
    }
    if (res.status == core::http::Http1Parser::Status::MessageComplete) break;
  }
  if (parser.head().status != 200) {
    out.error = "proxyconnect tcp: proxy answered " + std::to_string(parser.head().status) + " " +
                parser.head().reason;
    co_return out;
  }
  out.stream = std::move(conn);
  co_return out;
}

}  // namespace konn::kubeproxy
