// A small TLS "apiserver" for kubeproxy-http's tests and benchmark, and the apiserver of
// `scripts/dev-up.sh` that kubectl talks to. It checks the credentials it receives (bearer token,
// basic auth or client certificate) and serves, whatever the method:
//   GET  /version, /api, /apis, /api/v1       what kubectl asks first: the version and legacy
//                                             discovery (no groups; v1 has namespaces and pods)
//   GET  /api/v1/namespaces, /api/v1/pods,    lists: 4 namespaces; pod-0 and pod-1 in "default",
//        /api/v1/namespaces/NS/pods           none elsewhere; a meta.k8s.io Table when the Accept
//                                             header asks for one (kubectl get), else a *List;
//                                             with ?watch=1 or true a chunked watch (see
//                                             send_watch: --watch-events events, one every
//                                             --watch-interval-ms, then open until
//                                             timeoutSeconds, or with --watch-open until the
//                                             client leaves)
//   GET  /api/v1/namespaces/NS[/pods/NAME]    one object, or a NotFound Status
//   GET  /download?bytes=N                    N bytes (Content-Length; download_body.h says which)
//   POST /echo                                the request body back (Content-Length)
//   GET  /headers                             the request headers as JSON
//   GET  /stats                               connections accepted so far
//   GET  /whoami                              {"cn": CN of the verified client certificate of
//                                             this connection, "" without one}
//   any  path with "Upgrade: konn-echo"       101, then echoes bytes; on EOF writes "BYE\n" and
//                                             closes (exercises half-close)
//   any  /api/v1/namespaces/NS/pods/NAME/SUB  SUB exec, attach or portforward, routed as
//                                             kube-apiserver routes (on the percent-decoded
//                                             path, trailing slashes ignored): with
//                                             "Upgrade: SPDY/3.1" or "websocket", 101 and then
//                                             "reached SUB of NS/NAME as TARGET\n" and close;
//                                             without, 400 "Upgrade request required"
// The objects and lists answer exact paths only (".../default/" is a 404, as the differential
// test of kubeproxy-http expects).
// Paths are routed percent-decoded, as kube-apiserver does. A 404 names the request target as
// received (its `details.name`), so a test sees what a proxy forwarded.
// Usage: kubeproxy-fake-apiserver --cert c --key k [--client-ca ca] [--token t] [--basic u:p]
//        [--port 0] [--plain] ; prints "listening on 127.0.0.1:PORT".
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <asio/ssl.hpp>
#include <nlohmann/json.hpp>

#include "core/config/flag_parser.h"
#include "core/http/http1_parser.h"
#include "core/http/http1_writer.h"
#include "core/io/asio_compat.h"
#include "core/kube/kubeconfig.h"
#include "core/tls/tls_context.h"
#include "kubeproxy-http/byte_stream.h"
#include "kubeproxy-http/request_filter.h"
#include "tests/support/download_body.h"

namespace {

using konn::core::http::Headers;
using konn::core::http::Http1Parser;
using konn::core::io::Awaitable;
using konn::kubeproxy::ByteStream;

struct Config {
  std::string cert, key, client_ca, token, basic;
  int port = 0;
  bool plain = false;
  int watch_events = 5;
  int watch_interval_ms = 200;
  bool watch_open = false;
  uint16_t bound_port = 0;
};

std::atomic<uint64_t> g_connections{0};

Awaitable<bool> send(ByteStream& s, const std::string& text) {
  auto [ec, n] = co_await s.write(asio::buffer(text));
  co_return !ec;
}

Awaitable<bool> send_json(ByteStream& s, int status, const nlohmann::json& j) {
  std::string body = j.dump();
  Headers h{{"Content-Type", "application/json"},
            {"Content-Length", std::to_string(body.size())},
            {"Access-Control-Allow-Origin", "*"}};
  co_return co_await send(s, konn::core::http::write_response_head(status, "", h) + body);
}

nlohmann::json status_json(int code, const std::string& reason, const std::string& msg) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
          {"status", "Failure"}, {"message", msg},     {"reason", reason},
          {"code", code}};
}

// When this apiserver started: every object was "created" then, so kubectl's AGE column counts
// from it.
std::chrono::system_clock::time_point started_at() {
  static const std::chrono::system_clock::time_point at = std::chrono::system_clock::now();
  return at;
}

std::string rfc3339(std::chrono::system_clock::time_point t) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// kubectl's short ages (apimachinery's duration.HumanDuration, coarsened): 42s, 7m, 3h, 2d.
std::string age() {
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now() -
                                                               started_at())
                  .count();
  if (secs < 120) return std::to_string(secs) + "s";
  if (secs < 2 * 3600) return std::to_string(secs / 60) + "m";
  if (secs < 2 * 86400) return std::to_string(secs / 3600) + "h";
  return std::to_string(secs / 86400) + "d";
}

nlohmann::json metadata(const std::string& name, const std::string& ns, int resource_version) {
  char uid[40];
  std::snprintf(uid, sizeof uid, "00000000-0000-4000-8000-%012d", resource_version);
  nlohmann::json m = {{"name", name},
                      {"uid", uid},
                      {"resourceVersion", std::to_string(resource_version)},
                      {"creationTimestamp", rfc3339(started_at())}};
  if (!ns.empty()) m["namespace"] = ns;
  return m;
}

// The pods of namespace "default": pod-0 and pod-1 are listed, later ones only appear in a watch.
nlohmann::json pod(int i) {
  return {{"kind", "Pod"},
          {"apiVersion", "v1"},
          {"metadata", metadata("pod-" + std::to_string(i), "default", 100 + i)},
          {"spec",
           {{"nodeName", "dev-node"},
            {"containers", {{{"name", "app"}, {"image", "registry.k8s.io/pause:3.9"}}}}}},
          {"status",
           {{"phase", "Running"},
            {"podIP", "10.0.0." + std::to_string(10 + i)},
            {"containerStatuses", {{{"name", "app"}, {"ready", true}, {"restartCount", 0}}}}}}};
}

constexpr std::array<std::string_view, 4> kNamespaces = {"default", "kube-node-lease",
                                                         "kube-public", "kube-system"};
constexpr int kListedPods = 2;

nlohmann::json namespace_json(size_t i) {
  return {{"kind", "Namespace"},
          {"apiVersion", "v1"},
          {"metadata", metadata(std::string(kNamespaces[i]), "", 10 + static_cast<int>(i))},
          {"spec", {{"finalizers", {"kubernetes"}}}},
          {"status", {{"phase", "Active"}}}};
}

nlohmann::json version_json() {
  return {{"major", "1"},
          {"minor", "32"},
          {"gitVersion", "v1.32.0"},
          {"gitCommit", "0000000000000000000000000000000000000000"},
          {"gitTreeState", "clean"},
          {"buildDate", "2024-12-11T00:00:00Z"},
          {"goVersion", "go1.23.0"},
          {"compiler", "gc"},
          {"platform", "linux/amd64"}};
}

// What kubectl reads to learn that "pods" and "namespaces" (and "po", "ns") exist.
nlohmann::json core_v1_resources() {
  auto resource = [](const char* name, const char* singular, bool namespaced, const char* kind,
                     const char* short_name) {
    nlohmann::json r = {
        {"name", name}, {"singularName", singular},          {"namespaced", namespaced},
        {"kind", kind}, {"verbs", {"get", "list", "watch"}}, {"shortNames", {short_name}}};
    if (std::string(name) == "pods") r["categories"] = {"all"};
    return r;
  };
  return {{"kind", "APIResourceList"},
          {"apiVersion", "v1"},
          {"groupVersion", "v1"},
          {"resources",
           {resource("namespaces", "namespace", false, "Namespace", "ns"),
            resource("pods", "pod", true, "Pod", "po")}}};
}

// A server-side table (meta.k8s.io/v1 Table), what kubectl asks for with
// "Accept: application/json;as=Table;v=v1;g=meta.k8s.io": the columns kube-apiserver prints.
nlohmann::json table(const std::string& kind, const std::vector<nlohmann::json>& objects) {
  auto column = [](const char* name, const char* format) {
    return nlohmann::json{{"name", name},
                          {"type", "string"},
                          {"format", format},
                          {"description", name},
                          {"priority", 0}};
  };
  nlohmann::json columns = nlohmann::json::array();
  columns.push_back(column("Name", "name"));
  if (kind == "Pod") {
    for (const char* c : {"Ready", "Status", "Restarts"}) columns.push_back(column(c, ""));
  } else {
    columns.push_back(column("Status", ""));
  }
  columns.push_back(column("Age", ""));
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& o : objects) {
    nlohmann::json cells = {o["metadata"]["name"]};
    if (kind == "Pod") {
      cells.push_back("1/1");
      cells.push_back(o["status"]["phase"]);
      cells.push_back("0");
    } else {
      cells.push_back(o["status"]["phase"]);
    }
    cells.push_back(age());
    rows.push_back({{"cells", cells},
                    {"object",
                     {{"kind", "PartialObjectMetadata"},
                      {"apiVersion", "meta.k8s.io/v1"},
                      {"metadata", o["metadata"]}}}});
  }
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", {{"resourceVersion", "100"}}},
          {"columnDefinitions", columns},
          {"rows", rows}};
}

bool wants_table(const konn::core::http::MessageHead& h) {
  const std::string* accept = h.find("Accept");
  return accept != nullptr && accept->find("as=Table") != std::string::npos;
}

// The value of `name` in a query string ("" when absent; no decoding: the values used are plain).
std::string query_param(const std::string& query, const std::string& name) {
  size_t at = 0;
  while (at <= query.size()) {
    size_t end = query.find('&', at);
    if (end == std::string::npos) end = query.size();
    std::string_view kv(query.data() + at, end - at);
    if (kv.substr(0, kv.find('=')) == name) {
      return kv.find('=') == std::string_view::npos ? "" : std::string(kv.substr(kv.find('=') + 1));
    }
    at = end + 1;
  }
  return {};
}

bool is_watch(const std::string& query) {
  std::string w = query_param(query, "watch");
  return w == "1" || w == "true";
}

// A collection kubectl lists or watches: pods (of one namespace, or of all with ns "") or
// namespaces.
struct Listing {
  std::string kind;  // "Pod" or "Namespace"
  std::string ns;    // pods only; "" = every namespace

  // The objects a list returns.
  std::vector<nlohmann::json> objects() const {
    std::vector<nlohmann::json> out;
    if (kind == "Namespace") {
      for (size_t i = 0; i < kNamespaces.size(); ++i) out.push_back(namespace_json(i));
    } else if (ns.empty() || ns == "default") {
      for (int i = 0; i < kListedPods; ++i) out.push_back(pod(i));
    }
    return out;
  }
};

// Only exact paths (no trailing slash, no empty segment): kube-apiserver answers
// ".../default/" differently from ".../default", and the differential test relies on it.
bool exact(const std::string& path, const std::vector<std::string>& parts) {
  std::string joined;
  for (const auto& p : parts) joined += "/" + p;
  return joined == path;
}

std::optional<Listing> listing_of(const std::string& path, const std::vector<std::string>& parts) {
  if (!exact(path, parts) || parts.size() < 3 || parts[0] != "api" || parts[1] != "v1") {
    return std::nullopt;
  }
  if (parts.size() == 3 && parts[2] == "pods") return Listing{"Pod", ""};
  if (parts.size() == 3 && parts[2] == "namespaces") return Listing{"Namespace", ""};
  if (parts.size() == 5 && parts[2] == "namespaces" && parts[4] == "pods") {
    return Listing{"Pod", parts[3]};
  }
  return std::nullopt;
}

// GET of one namespace or pod: the object, a NotFound Status, or nullopt for other paths.
std::optional<nlohmann::json> object_at(const std::string& path,
                                        const std::vector<std::string>& parts) {
  if (!exact(path, parts) || parts.size() < 4 || parts[0] != "api" || parts[1] != "v1" ||
      parts[2] != "namespaces") {
    return std::nullopt;
  }
  if (parts.size() == 4) {
    for (size_t i = 0; i < kNamespaces.size(); ++i) {
      if (kNamespaces[i] == parts[3]) return namespace_json(i);
    }
    return status_json(404, "NotFound", "namespaces \"" + parts[3] + "\" not found");
  }
  if (parts.size() == 6 && parts[4] == "pods") {
    for (int i = 0; parts[3] == "default" && i < kListedPods; ++i) {
      if (parts[5] == "pod-" + std::to_string(i)) return pod(i);
    }
    return status_json(404, "NotFound", "pods \"" + parts[5] + "\" not found");
  }
  return std::nullopt;
}

Headers chunked_json_headers() {
  return {{"Content-Type", "application/json"}, {"Transfer-Encoding", "chunked"}};
}
Headers octet_headers(uint64_t n) {
  return {{"Content-Type", "application/octet-stream"}, {"Content-Length", std::to_string(n)}};
}

// A watch of `listing`: chunked, one JSON WatchEvent per line, its object a one-row Table when
// kubectl asks for tables. Without a resourceVersion (or with "0") the existing objects come
// first as ADDED, as kube-apiserver sends them; pods then keep arriving (pod-2, pod-3, ...) until
// --watch-events events were sent, one every --watch-interval-ms. With timeoutSeconds the stream
// then stays open until that timeout; without, it ends, or with --watch-open stays open until the
// client closes, as kube-apiserver's does.
Awaitable<bool> send_watch(ByteStream& s, const Listing& listing, bool as_table,
                           const std::string& query, const Config& cfg) {
  auto started = std::chrono::steady_clock::now();
  std::string rv = query_param(query, "resourceVersion");
  bool replay = rv.empty() || rv == "0";
  std::vector<nlohmann::json> objects;
  if (listing.kind == "Namespace") {
    if (replay) objects = listing.objects();
  } else if (listing.ns.empty() || listing.ns == "default") {
    for (int i = replay ? 0 : kListedPods; static_cast<int>(objects.size()) < cfg.watch_events;
         ++i) {
      objects.push_back(pod(i));
    }
  }
  Headers hs = chunked_json_headers();
  bool ok = co_await send(s, konn::core::http::write_response_head(200, "", hs));
  asio::steady_timer t(s.get_executor());
  for (size_t i = 0; ok && i < objects.size(); ++i) {
    if (i > 0) {
      t.expires_after(std::chrono::milliseconds(cfg.watch_interval_ms));
      co_await t.async_wait(konn::core::io::use_nothrow);
    }
    nlohmann::json e = {{"type", "ADDED"},
                        {"object", as_table ? table(listing.kind, {objects[i]}) : objects[i]}};
    std::string ev = e.dump() + "\n";
    ok = co_await send(s, konn::core::http::chunk_header(ev.size()) + ev + "\r\n");
  }
  long timeout = std::strtol(query_param(query, "timeoutSeconds").c_str(), nullptr, 10);
  if (ok && timeout > 0) {
    t.expires_at(started + std::chrono::seconds(std::min(timeout, 3600L)));
    co_await t.async_wait(konn::core::io::use_nothrow);
    co_return co_await send(s, std::string(konn::core::http::kLastChunk));
  }
  if (!ok || !cfg.watch_open) {
    co_return ok&& co_await send(s, std::string(konn::core::http::kLastChunk));
  }
  // --watch-open: open until the client leaves, as kube-apiserver's watch (kubectl's
  // --request-timeout ends it from the client side).
  std::vector<char> sink(4096);
  while (ok) {
    auto [ec, n] = co_await s.read_some(asio::buffer(sink));
    ok = !ec;
  }
  co_return false;
}

// Serves one connection (plain or TLS). `client_cert_ok` is true when the TLS peer presented a
// certificate our client CA verified; `client_cn` is its subject CN.
Awaitable<void> serve(ByteStream s, const Config& cfg, bool client_cert_ok,
                      std::string client_cn = {}) {
  std::vector<char> buf(64 * 1024);
  std::string pending;
  Http1Parser p(Http1Parser::Kind::Request);
  for (;;) {
    p.reset();
    std::string body;
    bool complete = false;
    while (!complete) {
      if (pending.empty()) {
        auto [ec, n] = co_await s.read_some(asio::buffer(buf));
        if (ec || n == 0) co_return;
        pending.assign(buf.data(), n);
      }
      auto r = p.feed(pending);
      for (auto piece : r.body) body.append(piece);
      pending.erase(0, r.consumed);
      if (r.status == Http1Parser::Status::Invalid) {
        co_await send(s, konn::core::http::write_text_response(400, "bad request\n", true));
        co_return;
      }
      complete = r.status == Http1Parser::Status::MessageComplete;
    }
    const auto& h = p.head();
    // kube-apiserver routes on the decoded path (Go's URL.Path).
    std::string path =
        konn::kubeproxy::RequestFilter::percent_decode(h.target.substr(0, h.target.find('?')));
    std::string query =
        h.target.find('?') == std::string::npos ? "" : h.target.substr(h.target.find('?') + 1);

    // Authentication: any configured method that matches; none configured = anonymous OK.
    bool need_auth = !cfg.token.empty() || !cfg.basic.empty() || !cfg.client_ca.empty();
    bool authed = !need_auth || client_cert_ok;
    if (const std::string* a = h.find("Authorization")) {
      if (!cfg.token.empty() && *a == "Bearer " + cfg.token) authed = true;
      if (!cfg.basic.empty() && *a == "Basic " + konn::core::kube::encode_base64(cfg.basic)) {
        authed = true;
      }
    }
    if (!authed) {
      if (!co_await send_json(s, 401, status_json(401, "Unauthorized", "Unauthorized"))) co_return;
      continue;
    }

    if (h.find("Upgrade") != nullptr &&
        konn::core::http::iequals(*h.find("Upgrade"), "konn-echo")) {
      if (!co_await send(s,
                         "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                         "Upgrade: konn-echo\r\n\r\n" +
                             pending)) {
        co_return;
      }
      for (;;) {
        auto [ec, n] = co_await s.read_some(asio::buffer(buf));
        if (n > 0 && !co_await send(s, std::string(buf.data(), n))) co_return;
        if (ec) break;
      }
      co_await send(s, "BYE\n");
      s.close();
      co_return;
    }

    // A pod subresource, split as kube-apiserver's RequestInfo splits the path.
    std::vector<std::string> parts;
    {
      std::string_view rest = path;
      while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
      while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
      while (!rest.empty()) {
        size_t slash = rest.find('/');
        parts.emplace_back(rest.substr(0, slash));
        rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
      }
    }
    if (parts.size() == 7 && parts[0] == "api" && parts[1] == "v1" && parts[2] == "namespaces" &&
        parts[4] == "pods" &&
        (parts[6] == "exec" || parts[6] == "attach" || parts[6] == "portforward")) {
      const std::string* up = h.find("Upgrade");
      if (up != nullptr && (konn::core::http::iequals(*up, "SPDY/3.1") ||
                            konn::core::http::iequals(*up, "websocket"))) {
        co_await send(s, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " +
                             *up + "\r\n\r\nreached " + parts[6] + " of " + parts[3] + "/" +
                             parts[5] + " as " + h.target + "\n");
        s.close();
        co_return;
      }
      nlohmann::json j = status_json(400, "BadRequest", "Upgrade request required");
      j["details"] = {{"name", h.target}};
      if (!co_await send_json(s, 400, j) || !h.keep_alive) co_return;
      continue;
    }

    bool ok = true;
    std::optional<Listing> listing = listing_of(path, parts);
    std::optional<nlohmann::json> one = object_at(path, parts);
    if (path == "/api" || path == "/api/") {
      nlohmann::json j = {{"kind", "APIVersions"},
                          {"versions", {"v1"}},
                          {"serverAddressByClientCIDRs",
                           {{{"clientCIDR", "0.0.0.0/0"},
                             {"serverAddress", "127.0.0.1:" + std::to_string(cfg.bound_port)}}}}};
      ok = co_await send_json(s, 200, j);
    } else if (path == "/apis") {
      nlohmann::json j = {
          {"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", nlohmann::json::array()}};
      ok = co_await send_json(s, 200, j);
    } else if (path == "/version") {
      ok = co_await send_json(s, 200, version_json());
    } else if (path == "/api/v1") {
      ok = co_await send_json(s, 200, core_v1_resources());
    } else if (listing && is_watch(query)) {
      ok = co_await send_watch(s, *listing, wants_table(h), query, cfg);
    } else if (listing) {
      std::vector<nlohmann::json> items = listing->objects();
      nlohmann::json j = wants_table(h) ? table(listing->kind, items)
                                        : nlohmann::json{{"kind", listing->kind + "List"},
                                                         {"apiVersion", "v1"},
                                                         {"metadata", {{"resourceVersion", "100"}}},
                                                         {"items", items}};
      ok = co_await send_json(s, 200, j);
    } else if (one) {
      if ((*one)["kind"] == "Status") {
        (*one)["details"] = {{"name", h.target}};
        ok = co_await send_json(s, 404, *one);
      } else {
        // Built outside the co_await: g++ 12 rejects an initializer list inside one.
        nlohmann::json body_json = wants_table(h) ? table((*one)["kind"], {*one}) : *one;
        ok = co_await send_json(s, 200, body_json);
      }
    } else if (path == "/download") {
      uint64_t n = 0;
      auto pos = query.find("bytes=");
      if (pos != std::string::npos) n = std::strtoull(query.c_str() + pos + 6, nullptr, 10);
      Headers hs = octet_headers(n);
      ok = co_await send(s, konn::core::http::write_response_head(200, "", hs));
      std::vector<char> piece(konn::testsupport::kDownloadPiece);
      for (uint64_t k = 0; ok && n > 0; ++k) {
        konn::testsupport::download_piece(k, piece.data());
        size_t m = std::min<uint64_t>(n, piece.size());
        auto [ec, w] = co_await s.write(asio::buffer(piece.data(), m));
        ok = !ec;
        n -= m;
      }
    } else if (path == "/echo") {
      Headers hs = octet_headers(body.size());
      ok = co_await send(s, konn::core::http::write_response_head(200, "", hs) + body);
    } else if (path == "/headers") {
      nlohmann::json j = nlohmann::json::object();
      for (const auto& [k, v] : h.headers) j[k].push_back(v);
      ok = co_await send_json(s, 200, j);
    } else if (path == "/whoami") {
      nlohmann::json j = nlohmann::json::object();
      j["cn"] = client_cn;
      ok = co_await send_json(s, 200, j);
    } else if (path == "/stats") {
      nlohmann::json j = {{"connections", g_connections.load()}};
      ok = co_await send_json(s, 200, j);
    } else {
      nlohmann::json j =
          status_json(404, "NotFound", "the server could not find the requested resource");
      j["details"] = {{"name", h.target}};
      ok = co_await send_json(s, 404, j);
    }
    if (!ok || !h.keep_alive) co_return;
  }
}

Awaitable<void> accept_loop(asio::ip::tcp::acceptor& acceptor, const Config& cfg,
                            std::shared_ptr<asio::ssl::context> tls) {
  for (;;) {
    auto [ec, sock] = co_await acceptor.async_accept(konn::core::io::use_nothrow);
    if (ec) co_return;
    g_connections.fetch_add(1);
    sock.set_option(asio::ip::tcp::no_delay(true));
    if (!tls) {
      asio::co_spawn(acceptor.get_executor(), serve(ByteStream(std::move(sock)), cfg, false),
                     asio::detached);
      continue;
    }
    asio::co_spawn(
        acceptor.get_executor(),
        [](asio::ip::tcp::socket sk, std::shared_ptr<asio::ssl::context> ctx,
           const Config& c) -> Awaitable<void> {
          auto st = std::make_unique<ByteStream::Tls>(std::move(sk), *ctx);
          auto [hec] = co_await st->async_handshake(asio::ssl::stream_base::server,
                                                    konn::core::io::use_nothrow);
          if (hec) co_return;
          X509* peer = SSL_get1_peer_certificate(st->native_handle());
          bool cert_ok = peer != nullptr && SSL_get_verify_result(st->native_handle()) == X509_V_OK;
          std::string cn;
          if (cert_ok) {
            char buf[256] = {};
            if (X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, buf,
                                          sizeof buf) > 0) {
              cn = buf;
            }
          }
          if (peer) X509_free(peer);
          co_await serve(ByteStream(std::move(st)), c, cert_ok, std::move(cn));
        }(std::move(sock), tls, cfg),
        asio::detached);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  konn::core::config::FlagParser flags(
      "kubeproxy-fake-apiserver", "The TLS apiserver stand-in of kubeproxy-http's tests and bench");
  flags.add("cert", &cfg.cert, "server certificate (PEM)");
  flags.add("key", &cfg.key, "server key (PEM)");
  flags.add("client-ca", &cfg.client_ca, "CA of accepted client certificates (optional)");
  flags.add("token", &cfg.token, "bearer token a request must carry");
  flags.add("basic", &cfg.basic, "user:password a request may carry instead");
  flags.add("port", &cfg.port, "port on 127.0.0.1 (0: any free port)");
  flags.add("plain", &cfg.plain, "serve plain HTTP instead of TLS");
  flags.add("watch-events", &cfg.watch_events, "events of the chunked watch");
  flags.add("watch-interval-ms", &cfg.watch_interval_ms, "milliseconds between watch events");
  flags.add("watch-open", &cfg.watch_open,
            "keep a watch without timeoutSeconds open after its events until the client leaves "
            "(kube-apiserver's behaviour; without it the stream ends)");
  auto parsed = flags.parse(argc, argv);
  if (parsed.exit_now) {
    std::cout << parsed.output;
    return 0;
  }
  if (!parsed.errors.empty()) {
    for (const auto& e : parsed.errors) std::cerr << "kubeproxy-fake-apiserver: " << e << "\n";
    return 2;
  }
  std::shared_ptr<asio::ssl::context> tls;
  if (!cfg.plain) {
    konn::core::tls::ServerTlsConfig t;
    t.cert_file = cfg.cert;
    t.key_file = cfg.key;
    tls = konn::core::tls::make_server_context(t);
    if (!cfg.client_ca.empty()) {
      // Ask for a client certificate but let token users in without one.
      tls->load_verify_file(cfg.client_ca);
      tls->set_verify_mode(asio::ssl::verify_peer);
      tls->set_verify_callback([](bool, asio::ssl::verify_context&) { return true; });
      // A client resuming a session (curl's parallel transfers share one cache) is refused
      // with an internal-error alert when the context has no session id context.
      static const unsigned char kSessionContext[] = "konn-fake-apiserver";
      SSL_CTX_set_session_id_context(tls->native_handle(), kSessionContext,
                                     sizeof kSessionContext - 1);
    }
  }
  started_at();  // objects are "created" at start-up
  asio::io_context ctx;
  asio::ip::tcp::acceptor acceptor(
      ctx, {asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(cfg.port)});
  cfg.bound_port = acceptor.local_endpoint().port();
  std::cout << "listening on 127.0.0.1:" << cfg.bound_port << std::endl;
  asio::co_spawn(ctx, accept_loop(acceptor, cfg, tls), asio::detached);
  ctx.run();
}
