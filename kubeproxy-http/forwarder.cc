#include "kubeproxy-http/forwarder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/post.hpp>

#include "core/http/http1_parser.h"
#include "core/http/http1_writer.h"
#include "core/log/log_macros.h"
#include "kubeproxy-http/upgrade.h"
#include "kubeproxy-http/watchdog.h"

namespace konn::kubeproxy {
namespace {

using core::http::Headers;
using core::http::Http1Parser;
using core::http::iequals;
using Status = Http1Parser::Status;
using Clock = std::chrono::steady_clock;

constexpr size_t kBufferSize = 64 * 1024;
// How long a keep-alive downstream connection may sit between requests, and an upstream one in
// the pool (Go's http.Transport IdleConnTimeout).
constexpr auto kIdleTimeout = std::chrono::seconds(90);

// Bytes read from the downstream connection and not yet parsed (pipelined requests stay here).
// The buffer is taken at the first read and given back when empty (release_if_empty), so an idle
// keep-alive connection holds none.
class InBuffer {
 public:
  std::string_view pending() const {
    return data_ ? std::string_view(data_.get() + begin_, end_ - begin_) : std::string_view();
  }
  void consume(size_t n) {
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }
  asio::mutable_buffer space() {
    if (!data_) data_ = std::make_unique_for_overwrite<char[]>(kBufferSize);
    if (end_ == kBufferSize && begin_ > 0) {
      std::copy(data_.get() + begin_, data_.get() + end_, data_.get());
      end_ -= begin_;
      begin_ = 0;
    }
    return asio::buffer(data_.get() + end_, kBufferSize - end_);
  }
  void commit(size_t n) { end_ += n; }
  void release_if_empty() {
    if (begin_ == end_) data_.reset();
  }

 private:
  std::unique_ptr<char[]> data_;  // not zeroed: filled by reads
  size_t begin_ = 0;
  size_t end_ = 0;
};

// A read of `s` bounded by `limit` (zero: unbounded), timed by the connection's watchdog,
// whose expiry cancels the read.
core::io::Awaitable<ByteStream::IoResult> read_within(ByteStream& s, Watchdog& watchdog,
                                                      asio::mutable_buffer b,
                                                      Clock::duration limit) {
  if (limit <= Clock::duration::zero()) co_return co_await s.read_some(b);
  watchdog.arm(limit);
  auto [ec, n] = co_await s.read_some(b);
  bool expired = watchdog.expired();
  watchdog.disarm();
  if (ec && expired) co_return ByteStream::IoResult{asio::error::timed_out, 0};
  co_return ByteStream::IoResult{ec, n};
}

// True once a read would not block; false after `limit` or an error.
core::io::Awaitable<bool> wait_readable_within(ByteStream& s, Watchdog& watchdog,
                                               Clock::duration limit) {
  watchdog.arm(limit);
  auto ec = co_await s.wait_readable();
  watchdog.disarm();
  co_return !ec;
}

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

std::string content_type_for(const std::string& path) {
  auto ext = std::filesystem::path(path).extension().string();
  if (ext == ".html" || ext == ".htm") return "text/html; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".js") return "text/javascript; charset=utf-8";
  if (ext == ".json") return "application/json";
  if (ext == ".png") return "image/png";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".txt") return "text/plain; charset=utf-8";
  return "application/octet-stream";
}

}  // namespace

struct Forwarder::Exchange {
  ByteStream& client;
  std::string peer;
  InBuffer in;
  Http1Parser req;
  Http1Parser resp{Http1Parser::Kind::Response, 1 << 20};
  // Upstream reads: taken per request (upstream_buffer()), given back between requests.
  std::unique_ptr<char[]> ubuf;
  std::string early_body;  // body bytes that arrived with the head (at most one buffer)
  bool body_done = false;  // the whole request message has been parsed
  Clock::time_point start{};
  int status = 0;
  uint64_t bytes_out = 0;
  Watchdog watchdog;  // bounds the waits for the client (read_within)

  Exchange(ByteStream& c, std::string p, size_t max_head)
      : client(c),
        peer(std::move(p)),
        req(Http1Parser::Kind::Request, max_head),
        watchdog(c.get_executor(), [&c] { c.cancel(); }) {}
  char* upstream_buffer() {
    if (!ubuf) ubuf = std::make_unique_for_overwrite<char[]>(kBufferSize);
    return ubuf.get();
  }
};

Forwarder::Forwarder(const KubeproxyOptions& options, const RestConfig& rest,
                     const std::vector<asio::execution_context*>& contexts)
    : options_(options),
      rest_(rest),
      credentials_(
          rest, std::chrono::duration_cast<std::chrono::milliseconds>(options.exec_plugin_timeout)),
      filter_(options.accept_paths, options.reject_paths, options.accept_hosts,
              options.reject_methods),
      dialer_(rest, std::chrono::duration_cast<std::chrono::milliseconds>(options.dial_timeout),
              // Go's net.Dialer: a zero KeepAlive means the default 15 s (kubectl's help text
              // says 0 disables it; it does not).
              options.keepalive.count() > 0
                  ? std::chrono::duration_cast<std::chrono::seconds>(options.keepalive)
                  : std::chrono::seconds(15)),
      log_(core::log::get("kubeproxy.forwarder")) {
  for (auto* c : contexts) idle_[c];
  const size_t workers = std::max<size_t>(1, contexts.size());
  max_idle_per_worker_ = std::max<size_t>(1, kMaxIdleUpstream / workers);
}

Forwarder::IdleList& Forwarder::idle_for(asio::any_io_executor ex) {
  static thread_local IdleList none;
  auto it = idle_.find(&asio::query(ex, asio::execution::context));
  if (it == idle_.end()) {
    none.clear();
    return none;
  }
  return it->second;
}

std::unique_ptr<ByteStream> Forwarder::take_idle(asio::any_io_executor ex, uint64_t generation) {
  auto& list = idle_for(ex);
  auto now = Clock::now();
  while (!list.empty()) {
    Idle idle = std::move(list.back());
    list.pop_back();
    // A connection opened with another client certificate authenticates as someone else (or as
    // an expired certificate): it is never reused once the plugin returned a new one.
    if (idle.generation == generation && now - idle.since < kIdleTimeout &&
        idle.stream->is_open()) {
      return std::move(idle.stream);
    }
    idle.stream->close();
  }
  return nullptr;
}

void Forwarder::put_idle(std::unique_ptr<ByteStream> s, uint64_t generation) {
  auto& list = idle_for(s->get_executor());
  if (list.size() >= max_idle_per_worker_) {
    list.front().stream->close();
    list.pop_front();
  }
  list.push_back(Idle{std::move(s), Clock::now(), generation});
}

bool Forwarder::drops_caller_credentials() const {
  return options_.strip_client_credentials || !options_.require_token.empty();
}

bool Forwarder::caller_authorized(const Exchange& x) const {
  return !drops_caller_credentials() && x.req.head().find("Authorization") != nullptr;
}

Forwarder::UpstreamAuth Forwarder::with_tls(CredentialSource::Credential c) {
  UpstreamAuth out;
  if (!c.error.empty()) {
    out.error = std::move(c.error);
    return out;
  }
  out.authorization = std::move(c.authorization);
  if (c.client_cert_pem.empty() || rest_.scheme != "https") return out;
  std::lock_guard lock(exec_tls_mu_);
  if (!exec_tls_ || c.client_cert_pem != exec_cert_pem_ || c.client_key_pem != exec_key_pem_) {
    try {
      exec_tls_ = dialer_.context_with_client_cert(c.client_cert_pem, c.client_key_pem);
    } catch (const std::exception& e) {
      exec_tls_.reset();
      out.error = std::string("exec plugin returned an unusable client certificate: ") + e.what();
      return out;
    }
    exec_cert_pem_ = std::move(c.client_cert_pem);
    exec_key_pem_ = std::move(c.client_key_pem);
    ++exec_generation_;
  }
  out.tls = exec_tls_;
  out.generation = exec_generation_;
  return out;
}

core::io::Awaitable<Forwarder::UpstreamAuth> Forwarder::upstream_auth(bool caller_authorized) {
  using Credential = CredentialSource::Credential;
  if (rest_.exec && caller_authorized) {
    // client-go's exec round tripper leaves a request that has an Authorization alone; its
    // TLS client certificate is the plugin's latest, if the plugin gave one.
    Credential c = credentials_.last_exec().value_or(Credential{});
    c.authorization.clear();
    co_return with_tls(std::move(c));
  }
  if (auto c = credentials_.cached()) co_return with_tls(std::move(*c));
  // The plugin has to run (or is running): wait for its result, posted back to this coroutine's
  // executor from the runner thread.
  Credential c = co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(Credential)>(
      [this](auto handler) {
        auto ex = asio::get_associated_executor(handler);
        auto h = std::make_shared<decltype(handler)>(std::move(handler));
        credentials_.fetch([h, ex](Credential cred) {
          asio::post(ex, [h, cred = std::move(cred)]() mutable { (*h)(std::move(cred)); });
        });
      },
      asio::use_awaitable);
  co_return with_tls(std::move(c));
}

core::io::Awaitable<void> Forwarder::serve(ByteStream client, std::string peer,
                                           LiveConnection* live) {
  Exchange x(client, std::move(peer), static_cast<size_t>(options_.max_header_bytes));
  bool first = true;
  for (;;) {
    x.req.reset();
    x.early_body.clear();
    x.body_done = false;
    x.status = 0;
    x.bytes_out = 0;
    Clock::time_point head_deadline{};
    bool keep = true;
    while (!x.req.head_ready()) {
      if (x.in.pending().empty()) {
        Clock::duration limit;
        if (!x.req.idle() || first) {
          if (head_deadline == Clock::time_point{}) {
            head_deadline = Clock::now() + options_.request_header_timeout;
          }
          limit = options_.request_header_timeout.count() > 0
                      ? std::max(head_deadline - Clock::now(), Clock::duration(1))
                      : Clock::duration::zero();
        } else {
          limit = kIdleTimeout;
          // Between requests: no buffer is held while the client keeps the connection idle.
          x.in.release_if_empty();
          x.ubuf.reset();
          if (!co_await wait_readable_within(client, x.watchdog, limit)) {
            keep = false;
            break;
          }
        }
        auto [ec, n] = co_await read_within(client, x.watchdog, x.in.space(), limit);
        if (ec || n == 0) {
          if (ec == asio::error::timed_out && !x.req.idle()) {
            std::string resp = core::http::write_text_response(408, "Request Timeout\n", true);
            co_await client.write(asio::buffer(resp));
            KONN_LOG(log_, debug, "{}: request head not complete in time, closed", x.peer);
          }
          keep = false;
          break;
        }
        x.in.commit(n);
      }
      if (x.req.idle()) x.start = Clock::now();
      auto r = x.req.feed(x.in.pending());
      x.in.consume(r.consumed);
      for (auto piece : r.body) x.early_body.append(piece);
      if (r.status == Status::Invalid) {
        int code = x.req.error_status();
        std::string resp = core::http::write_text_response(
            code, std::string(core::http::reason_phrase(code)) + ": " + x.req.error() + "\n", true);
        co_await client.write(asio::buffer(resp));
        KONN_LOG(log_, info, "{}: rejected request ({}): {}", x.peer, code, x.req.error());
        keep = false;
        break;
      }
      if (r.status == Status::MessageComplete) x.body_done = true;
    }
    if (!keep) break;
    first = false;
    stats_.requests.fetch_add(1, std::memory_order_relaxed);
    // The path without its query (a query may carry a token); never a header.
    std::string line =
        x.req.head().method + " " + x.req.head().target.substr(0, x.req.head().target.find('?'));
    if (live != nullptr) live->set(line, apiserver_, "apiserver");
    keep = co_await handle(x);
    if (live != nullptr) {
      live->requests.fetch_add(1, std::memory_order_relaxed);
      live->bytes_down.fetch_add(x.bytes_out, std::memory_order_relaxed);
    }
    if (tracker_ != nullptr && (x.status == 0 || x.status >= 400)) {
      tracker_->record_failure({std::chrono::system_clock::now(), x.peer, line, apiserver_,
                                x.status,
                                x.status == 0 ? std::string("no answer")
                                              : std::string(core::http::reason_phrase(x.status))});
    }
    if (metrics_ != nullptr) {
      metrics_->request("proxy");
      if (x.status != 0) metrics_->response(x.status);
      metrics_->bytes(0, x.bytes_out);
    }
    if (options_.access_log) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - x.start);
      log_->info("{} \"{} {}\" {} {} {}ms", x.peer, x.req.head().method, x.req.head().target,
                 x.status, x.bytes_out, ms.count());
    }
    if (!keep) break;
  }
  client.close();
}

namespace {

Headers www_authenticate() { return {{"WWW-Authenticate", "Bearer realm=\"kubeproxy-http\""}}; }

// Go's net/http wording for requests it refuses before a handler runs. Named objects, not
// temporaries: g++ 12 mishandles some temporaries that live across a co_await.
const std::string kGoBadRequest = "400 Bad Request";
const std::string kGoMissingHost = "400 Bad Request: missing required Host header";
const std::string kGoMalformedHost = "400 Bad Request: malformed Host header";
const std::string kNoBody;

core::io::Awaitable<bool> send_text(ByteStream& client, int status, const std::string& body,
                                    bool close, int& status_out, const Headers& extra = {}) {
  status_out = status;
  std::string resp = core::http::write_text_response(status, body, close, extra);
  auto [ec, n] = co_await client.write(asio::buffer(resp));
  co_return !ec && !close;
}

}  // namespace

core::io::Awaitable<bool> Forwarder::handle(Exchange& x) {
  const auto& h = x.req.head();
  // A request that is not answered here may still be followed by another on this connection
  // only when its body has been read (or is forwarded, and so consumed).
  bool can_keep = x.body_done && h.keep_alive;

  // Go's net/http answers these before any handler runs; kubectl's filter never sees them.
  if (h.target == "*") {
    if (h.method == "OPTIONS") {
      co_return co_await send_text(x.client, 200, kNoBody, !can_keep, x.status);
    }
    co_return co_await send_text(x.client, 400, kNoBody, true, x.status);
  }
  std::string_view target = h.target;
  // The host the request names, as Go's r.Host: the authority of an absolute-form target
  // (RFC 9112 3.2.2: the Host header is then ignored), else the Host header.
  std::string_view host_value;
  size_t hosts = 0;
  for (const auto& [k, v] : h.headers) {
    if (iequals(k, "Host")) {
      if (hosts++ == 0) host_value = v;
    }
  }
  if (starts_with_ci(target, "http://") || starts_with_ci(target, "https://")) {
    size_t auth = target.find("://") + 3;
    size_t end = target.find_first_of("/?", auth);
    host_value = target.substr(auth, end == std::string_view::npos ? end : end - auth);
    if (size_t at = host_value.rfind('@'); at != std::string_view::npos) {
      host_value.remove_prefix(at + 1);
    }
    // Go's url.Parse refuses a port that is not a number.
    std::string_view port =
        RequestFilter::strip_port(host_value) == host_value
            ? std::string_view()
            : host_value.substr(RequestFilter::strip_port(host_value).size() + 1);
    if (port.find_first_not_of("0123456789") != std::string_view::npos) {
      co_return co_await send_text(x.client, 400, kGoBadRequest, true, x.status);
    }
    target = end == std::string_view::npos ? std::string_view("/") : target.substr(end);
    if (!target.empty() && target.front() == '?') target = "/";  // "http://h?q": path "/"
  }
  if (hosts > 1) {
    co_return co_await send_text(x.client, 400, kGoBadRequest, true, x.status);
  }
  if (hosts == 0 && h.version_minor >= 1) {
    co_return co_await send_text(x.client, 400, kGoMissingHost, true, x.status);
  }
  if (!RequestFilter::valid_host(host_value)) {
    co_return co_await send_text(x.client, 400, kGoMalformedHost, true, x.status);
  }
  size_t qmark = target.find('?');
  std::string path(target.substr(0, qmark));
  std::string query(qmark == std::string_view::npos ? std::string_view() : target.substr(qmark));
  // Go refuses a request whose path is not rooted or holds a malformed escape ("%zz", "%6"):
  // nothing after it could say what the path means.
  if (path.empty() || path.front() != '/' || !RequestFilter::valid_escapes(path)) {
    co_return co_await send_text(x.client, 400, kGoBadRequest, true, x.status);
  }
  // kubectl's ServeMux answers a path with empty, "." or ".." segments (as sent, before
  // decoding) with a redirect to the cleaned path, for every method but CONNECT. The Location
  // keeps the client's escapes (kubectl escapes their '%' again, which names another path).
  if (h.method != "CONNECT" && !RequestFilter::is_clean(path)) {
    std::string location = RequestFilter::clean_path(path) + (query.size() > 1 ? query : "");
    co_return co_await redirect(x, location, can_keep);
  }

  if (!options_.www.empty() && path.rfind(options_.www_prefix, 0) == 0) {
    std::string rel = RequestFilter::percent_decode(path.substr(options_.www_prefix.size()));
    co_return co_await serve_static(x, rel);
  }

  std::string prefix = options_.api_prefix;
  if (prefix.back() != '/') prefix.push_back('/');
  if (path + "/" == prefix && prefix != "/") {
    // ServeMux: "/custom" -> "/custom/" when only "/custom/" is served.
    std::string location = prefix + (query.size() > 1 ? query : "");
    co_return co_await redirect(x, location, can_keep);
  }
  if (path.rfind(prefix, 0) != 0) {
    co_return co_await send_text(x.client, 404, std::string("404 page not found\n"), !can_keep,
                                 x.status);
  }
  if (prefix.rfind("/api", 0) != 0 && prefix != "/") {
    path = "/" + path.substr(prefix.size());
  }

  if (!options_.require_token.empty()) {
    const std::string* auth = h.find("Authorization");
    if (auth == nullptr || *auth != "Bearer " + options_.require_token) {
      co_return co_await send_text(x.client, 401, std::string("Unauthorized\n"), !can_keep,
                                   x.status, www_authenticate());
    }
  }

  if (!options_.disable_filter) {
    std::string_view host_only = RequestFilter::strip_port(host_value);
    if (!filter_.accept(h.method, path, host_only)) {
      KONN_LOG(log_, debug, "{}: filter rejecting {} {} {}", x.peer, h.method, path, host_only);
      co_return co_await send_text(x.client, 403, std::string("Forbidden\n"), !can_keep, x.status);
    }
  }

  // A '#' in the path is a character of the path to Go (the filter read it so), but the start of
  // a fragment to many other HTTP parsers: send it escaped, as Go's client does.
  for (size_t at = path.find('#'); at != std::string::npos; at = path.find('#', at + 3)) {
    path.replace(at, 1, "%23");
  }
  std::string upstream_target =
      (options_.append_server_path ? rest_.path : std::string()) + path + query;
  if (h.upgrade && h.method != "CONNECT" && h.find("Upgrade") != nullptr) {
    co_return co_await upgrade(x, upstream_target);
  }
  co_return co_await forward(x, upstream_target);
}

std::string Forwarder::upstream_head(const Exchange& x, const std::string& target, bool is_upgrade,
                                     const std::string& authorization) {
  const auto& h = x.req.head();
  bool drop_auth = drops_caller_credentials();
  Headers out;
  out.reserve(h.headers.size() + 6);
  out.emplace_back("Host", rest_.host_header());
  bool has_auth = false;
  bool has_impersonate = false;
  std::string forwarded_for;
  for (const auto& [k, v] : h.headers) {
    if (iequals(k, "Host") || iequals(k, "Content-Length") || iequals(k, "Expect")) continue;
    if (iequals(k, "X-Forwarded-For")) {
      forwarded_for = v;
      continue;
    }
    if (core::http::is_hop_by_hop(h, k) && !(is_upgrade && iequals(k, "Upgrade"))) continue;
    if (drop_auth && (iequals(k, "Authorization") || starts_with_ci(k, "Impersonate-"))) continue;
    if (iequals(k, "Authorization")) has_auth = true;
    if (iequals(k, "Impersonate-User")) has_impersonate = true;
    out.emplace_back(k, v);
  }
  if (is_upgrade) out.emplace_back("Connection", "Upgrade");
  if (h.chunked) {
    out.emplace_back("Transfer-Encoding", "chunked");
  } else if (h.content_length) {
    out.emplace_back("Content-Length", std::to_string(*h.content_length));
  }
  // client-go adds credentials only when the request carries none (kubectl passes callers'
  // headers through; --strip-client-credentials removes them above).
  if (!has_auth && !authorization.empty()) out.emplace_back("Authorization", authorization);
  if (!has_impersonate && !rest_.impersonate_user.empty()) {
    out.emplace_back("Impersonate-User", rest_.impersonate_user);
    for (const auto& g : rest_.impersonate_groups) out.emplace_back("Impersonate-Group", g);
  }
  std::string peer_ip = x.peer.substr(0, x.peer.rfind(':'));
  if (!peer_ip.empty() && peer_ip.front() == '[') peer_ip = peer_ip.substr(1, peer_ip.size() - 2);
  if (!peer_ip.empty()) {
    out.emplace_back("X-Forwarded-For",
                     forwarded_for.empty() ? peer_ip : forwarded_for + ", " + peer_ip);
  }
  return core::http::write_request_head(h.method, target, out);
}

core::io::Awaitable<bool> Forwarder::forward(Exchange& x, const std::string& target) {
  const auto& h = x.req.head();
  const bool chunked_in = h.chunked;
  const bool replayable = x.body_done;
  UpstreamAuth auth = co_await upstream_auth(caller_authorized(x));
  if (!auth.error.empty()) {
    KONN_LOG(log_, warn, "{}: {} {}: getting credentials: {}", x.peer, h.method, target,
             auth.error);
    co_return co_await send_text(x.client, 502, "getting credentials: " + auth.error + "\n",
                                 !(x.body_done && h.keep_alive), x.status);
  }
  std::string head = upstream_head(x, target, false, auth.authorization);
  if (!x.body_done && h.has_token("Expect", "100-continue")) {
    // We stream the body as it comes: tell the client to send it now.
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    co_await x.client.write(asio::buffer(kContinue));
  }
  auto ex = x.client.get_executor();
  auto ubuf = asio::buffer(x.upstream_buffer(), kBufferSize);

  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<ByteStream> up;
    bool reused = false;
    if (replayable && attempt == 0) up = take_idle(ex, auth.generation);
    if (up) {
      reused = true;
      stats_.pool_reuses.fetch_add(1, std::memory_order_relaxed);
    } else {
      stats_.upstream_dials.fetch_add(1, std::memory_order_relaxed);
      auto d = co_await dialer_.dial(ex, auth.tls);
      if (!d.stream) {
        KONN_LOG(log_, warn, "{}: {} {}: {}", x.peer, h.method, target, d.error);
        co_return co_await send_text(
            x.client, d.timeout ? 504 : 502,
            "Error trying to reach the API server: " + d.error + std::string("\n"),
            !(x.body_done && h.keep_alive), x.status);
      }
      up = std::move(d.stream);
    }

    // Request: head and the body bytes we already have, then the rest as it arrives.
    {
      std::string chunk_head;
      std::vector<asio::const_buffer> out{asio::buffer(head)};
      if (!x.early_body.empty()) {
        if (chunked_in) {
          chunk_head = core::http::chunk_header(x.early_body.size());
          out.push_back(asio::buffer(chunk_head));
        }
        out.push_back(asio::buffer(x.early_body));
        if (chunked_in) out.push_back(asio::buffer(core::http::kChunkEnd));
      }
      if (chunked_in && x.body_done) out.push_back(asio::buffer(core::http::kLastChunk));
      auto [wec, wn] = co_await up->write(out);
      if (wec) {
        up->close();
        if (reused) continue;
        co_return co_await send_text(
            x.client, 502,
            "Error trying to reach the API server: " + wec.message() + std::string("\n"), true,
            x.status);
      }
    }
    while (!x.body_done) {
      if (x.in.pending().empty()) {
        auto [ec, n] = co_await read_within(x.client, x.watchdog, x.in.space(), kIdleTimeout);
        if (ec || n == 0) {
          up->close();
          co_return false;
        }
        x.in.commit(n);
      }
      auto r = x.req.feed(x.in.pending());
      x.in.consume(r.consumed);
      if (r.status == Status::Invalid) {
        up->close();
        co_return co_await send_text(
            x.client, 400, "Bad Request: " + x.req.error() + std::string("\n"), true, x.status);
      }
      std::vector<std::string> heads;
      heads.reserve(r.body.size());
      std::vector<asio::const_buffer> out;
      for (auto piece : r.body) {
        if (chunked_in) {
          heads.push_back(core::http::chunk_header(piece.size()));
          out.push_back(asio::buffer(heads.back()));
        }
        out.push_back(asio::buffer(piece.data(), piece.size()));
        if (chunked_in) out.push_back(asio::buffer(core::http::kChunkEnd));
      }
      if (r.status == Status::MessageComplete) {
        x.body_done = true;
        if (chunked_in) out.push_back(asio::buffer(core::http::kLastChunk));
      }
      if (!out.empty()) {
        auto [wec, wn] = co_await up->write(out);
        if (wec) {
          up->close();
          co_return co_await send_text(
              x.client, 502,
              "Error trying to reach the API server: " + wec.message() + std::string("\n"), true,
              x.status);
        }
      }
    }

    // Response: streamed to the client as it arrives.
    Http1Parser& resp = x.resp;
    resp.reset();
    resp.expect_no_body(h.method == "HEAD");
    bool got_any = false;
    bool head_sent = false;
    bool chunked_out = false;
    bool close_client = !h.keep_alive;
    bool done = false;
    while (!done) {
      auto [ec, n] = co_await up->read_some(ubuf);
      // TLS hands out one record (16 KiB) per read. When more is already received, take it too
      // so the client gets fewer, larger writes. A partial record in the buffer means the rest
      // is in flight, so this never waits for an event that has not been sent (watch).
      while (!ec && n + 16 * 1024 <= kBufferSize && up->buffered() > 0) {
        auto [ec2, n2] = co_await up->read_some(asio::buffer(x.ubuf.get() + n, kBufferSize - n));
        n += n2;
        if (ec2) {
          ec = ec2;
          break;
        }
      }
      std::string_view data(x.ubuf.get(), n);
      std::vector<asio::const_buffer> out;
      std::vector<std::string> framing;
      framing.reserve(8);
      std::string head_text;
      if (n > 0) got_any = true;
      while (!data.empty() && !done) {
        auto r = resp.feed(data);
        data.remove_prefix(r.consumed);
        if (r.status == Status::Invalid) {
          up->close();
          if (!head_sent) {
            co_return co_await send_text(x.client, 502,
                                         "Bad Gateway: malformed response from the API server: " +
                                             resp.error() + std::string("\n"),
                                         true, x.status);
          }
          co_return false;
        }
        const auto& rh = resp.head();
        if (r.head_complete) {
          if (rh.status >= 100 && rh.status < 200 && rh.status != 101) {
            // Interim answer (we already sent our own 100 Continue): skip it.
            resp.reset();
            resp.expect_no_body(h.method == "HEAD");
            continue;
          }
          Headers hs;
          hs.reserve(rh.headers.size() + 2);
          for (const auto& [k, v] : rh.headers) {
            if (core::http::is_hop_by_hop(rh, k) || iequals(k, "Content-Length")) continue;
            // kubectl proxy removes CORS headers so a browser page cannot use the proxy.
            if (starts_with_ci(k, "Access-Control-")) continue;
            hs.emplace_back(k, v);
          }
          bool no_body = h.method == "HEAD" || rh.status == 204 || rh.status == 304;
          if (rh.content_length) {
            hs.emplace_back("Content-Length", std::to_string(*rh.content_length));
          } else if (!no_body) {
            if (h.version_minor >= 1) {
              chunked_out = true;
              hs.emplace_back("Transfer-Encoding", "chunked");
            } else {
              close_client = true;
            }
          }
          if (close_client) hs.emplace_back("Connection", "close");
          x.status = rh.status;
          head_text = core::http::write_response_head(rh.status, rh.reason, hs);
          out.push_back(asio::buffer(head_text));
          head_sent = true;
        }
        for (auto piece : r.body) {
          if (chunked_out) {
            framing.push_back(core::http::chunk_header(piece.size()));
            out.push_back(asio::buffer(framing.back()));
          }
          out.push_back(asio::buffer(piece.data(), piece.size()));
          if (chunked_out) out.push_back(asio::buffer(core::http::kChunkEnd));
          x.bytes_out += piece.size();
          if (framing.size() == framing.capacity()) {
            // Keep views into `framing` valid: never let it reallocate.
            auto [wec, wn] = co_await x.client.write(out);
            if (wec) {
              up->close();
              co_return false;
            }
            out.clear();
            framing.clear();
          }
        }
        if (r.status == Status::MessageComplete) {
          if (chunked_out) out.push_back(asio::buffer(core::http::kLastChunk));
          done = true;
        }
      }
      if (!out.empty()) {
        auto [wec, wn] = co_await x.client.write(out);
        if (wec) {
          up->close();
          co_return false;
        }
      }
      if (done) break;
      if (ec) {
        if (!got_any) {
          up->close();
          if (reused && attempt == 0) break;  // stale pooled connection: retry on a new one
          co_return co_await send_text(
              x.client, 502,
              "Error trying to reach the API server: " +
                  (ec == asio::error::eof ? std::string(std::string("EOF")) : ec.message()) +
                  std::string("\n"),
              true, x.status);
        }
        if (resp.finish()) {
          if (chunked_out) {
            co_await x.client.write(asio::buffer(core::http::kLastChunk));
          }
          up->close();
          co_return !close_client;
        }
        // Cut mid-message: the client must see a broken response, not a complete one.
        up->close();
        co_return false;
      }
    }
    if (!done) continue;  // retry
    if (resp.head().keep_alive) {
      put_idle(std::move(up), auth.generation);
    } else {
      up->close();
    }
    co_return !close_client && x.body_done;
  }
}

core::io::Awaitable<bool> Forwarder::upgrade(Exchange& x, const std::string& target) {
  UpstreamAuth auth = co_await upstream_auth(caller_authorized(x));
  if (!auth.error.empty()) {
    KONN_LOG(log_, warn, "{}: upgrade {}: getting credentials: {}", x.peer, target, auth.error);
    co_return co_await send_text(x.client, 502, "getting credentials: " + auth.error + "\n", true,
                                 x.status);
  }
  std::string head = upstream_head(x, target, true, auth.authorization);
  stats_.upstream_dials.fetch_add(1, std::memory_order_relaxed);
  auto d = co_await dialer_.dial(x.client.get_executor(), auth.tls);
  if (!d.stream) {
    KONN_LOG(log_, warn, "{}: upgrade {}: {}", x.peer, target, d.error);
    co_return co_await send_text(
        x.client, d.timeout ? 504 : 502,
        "Error trying to reach the API server: " + d.error + std::string("\n"), true, x.status);
  }
  auto& up = *d.stream;
  // Bytes the client sent after its head already belong to the upgraded protocol.
  std::string early(x.in.pending());
  x.in.consume(early.size());
  std::vector<asio::const_buffer> out{asio::buffer(head), asio::buffer(early)};
  auto [wec, wn] = co_await up.write(out);
  if (wec) {
    co_return co_await send_text(
        x.client, 502, "Error trying to reach the API server: " + wec.message() + std::string("\n"),
        true, x.status);
  }
  auto outcome = co_await finish_upgrade(x.client, up, options_.half_close_timeout);
  x.status = outcome.status;
  if (outcome.status == 0) {
    co_return co_await send_text(x.client, 502, "Bad Gateway: " + outcome.error + std::string("\n"),
                                 true, x.status);
  }
  x.bytes_out = outcome.relayed.upstream_to_downstream;
  KONN_LOG(log_, debug, "{}: upgrade {} ended with {}: {} bytes up, {} bytes down", x.peer, target,
           outcome.status, outcome.relayed.downstream_to_upstream,
           outcome.relayed.upstream_to_downstream);
  up.close();
  co_return false;
}

core::io::Awaitable<bool> Forwarder::redirect(Exchange& x, const std::string& location,
                                              bool can_keep) {
  // As Go's http.Redirect writes it: an HTML body for GET only, a Content-Type for GET and HEAD.
  const auto& h = x.req.head();
  Headers hs{{"Location", location}};
  std::string body;
  if (h.method == "GET" || h.method == "HEAD") {
    hs.emplace_back("Content-Type", "text/html; charset=utf-8");
  }
  if (h.method == "GET") {
    std::string href;
    for (char c : location) {
      switch (c) {
        case '&':
          href += "&amp;";
          break;
        case '<':
          href += "&lt;";
          break;
        case '>':
          href += "&gt;";
          break;
        case '"':
          href += "&#34;";
          break;
        case '\'':
          href += "&#39;";
          break;
        default:
          href.push_back(c);
      }
    }
    body = "<a href=\"" + href + "\">Moved Permanently</a>.\n\n";
  }
  if (h.method != "HEAD") hs.emplace_back("Content-Length", std::to_string(body.size()));
  if (!can_keep) hs.emplace_back("Connection", "close");
  x.status = 301;
  std::string resp = core::http::write_response_head(301, "", hs) + body;
  auto [ec, n] = co_await x.client.write(asio::buffer(resp));
  co_return !ec && can_keep;
}

core::io::Awaitable<bool> Forwarder::serve_static(Exchange& x, const std::string& rel) {
  const auto& h = x.req.head();
  bool can_keep = x.body_done && h.keep_alive;
  if (h.method != "GET" && h.method != "HEAD") {
    co_return co_await send_text(x.client, 405, std::string("Method Not Allowed\n"), !can_keep,
                                 x.status);
  }
  // A decoded NUL would cut the name the file system sees: no such file.
  if (rel.find('\0') != std::string::npos) {
    co_return co_await send_text(x.client, 404, std::string("404 page not found\n"), !can_keep,
                                 x.status);
  }
  std::filesystem::path p = std::filesystem::path(options_.www) / rel;
  for (const auto& part : std::filesystem::path(rel)) {
    if (part == "..")
      co_return co_await send_text(x.client, 404, std::string("404 page not found\n"), !can_keep,
                                   x.status);
  }
  std::error_code fec;
  if (std::filesystem::is_directory(p, fec)) p /= "index.html";
  std::ifstream in(p, std::ios::binary);
  auto size = std::filesystem::file_size(p, fec);
  if (!in || fec) {
    co_return co_await send_text(x.client, 404, std::string("404 page not found\n"), !can_keep,
                                 x.status);
  }
  x.status = 200;
  Headers hs{{"Content-Type", content_type_for(p.string())},
             {"Content-Length", std::to_string(size)}};
  if (!can_keep) hs.emplace_back("Connection", "close");
  std::string head = core::http::write_response_head(200, "", hs);
  auto [ec, n] = co_await x.client.write(asio::buffer(head));
  if (ec) co_return false;
  if (h.method == "HEAD") co_return can_keep;
  std::vector<char> buf(kBufferSize);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    auto got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    auto [wec, wn] = co_await x.client.write(asio::buffer(buf.data(), got));
    if (wec) co_return false;
    x.bytes_out += got;
  }
  co_return can_keep;
}

}  // namespace konn::kubeproxy
