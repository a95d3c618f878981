#include "tests/support/fake_apiserver.h"

#include <cctype>
#include <fstream>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <nlohmann/json.hpp>

#include "core/http/http1_parser.h"

namespace konn::testsupport {
namespace {

using nlohmann::json;

const std::string kLeasePrefix = "/apis/coordination.k8s.io/v1/namespaces/";

std::string status_body(int code, const std::string& reason, const std::string& message) {
  json s = {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
            {"reason", reason}, {"code", code},       {"message", message}};
  return s.dump();
}

std::string url_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else if (s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.erase(0, 1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.pop_back();
  return s;
}

// Equality-based label selectors (what konn and upstream send): comma-joined requirements.
bool selector_matches(const std::string& selector, const json& labels) {
  size_t start = 0;
  while (start <= selector.size()) {
    size_t comma = selector.find(',', start);
    std::string req = trim(
        selector.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (!req.empty()) {
      auto label = [&](const std::string& key) -> std::optional<std::string> {
        if (!labels.is_object() || !labels.contains(key) || !labels[key].is_string()) {
          return std::nullopt;
        }
        return labels[key].get<std::string>();
      };
      if (auto ne = req.find("!="); ne != std::string::npos) {
        if (label(trim(req.substr(0, ne))) == trim(req.substr(ne + 2))) return false;
      } else if (auto eq = req.find('='); eq != std::string::npos) {
        size_t vstart = req.compare(eq, 2, "==") == 0 ? eq + 2 : eq + 1;
        if (label(trim(req.substr(0, eq))) != trim(req.substr(vstart))) return false;
      } else if (req.front() == '!') {
        if (label(trim(req.substr(1)))) return false;
      } else if (!label(req)) {
        return false;
      }
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return true;
}

}  // namespace

struct FakeApiserver::Request {
  std::string method;
  std::string path;  // without the query
  std::map<std::string, std::string> query;
  core::http::MessageHead head;
  std::string body;
};

FakeApiserver::FakeApiserver(const std::string& cert_file, const std::string& key_file,
                             std::string caller_token)
    : caller_token_(std::move(caller_token)),
      acceptor_(ctx_, {asio::ip::make_address("127.0.0.1"), 0}) {
  tls_.use_certificate_chain_file(cert_file);
  tls_.use_private_key_file(key_file, asio::ssl::context::pem);
  port_ = acceptor_.local_endpoint().port();
  thread_ = std::thread([this] {
    for (;;) {
      std::error_code ec;
      asio::ip::tcp::socket s(ctx_);
      acceptor_.accept(s, ec);
      if (ec || stop_) return;
      ++active_;
      std::thread([this, s = std::move(s)]() mutable {
        serve(std::move(s));
        --active_;
      }).detach();
    }
  });
}

FakeApiserver::~FakeApiserver() {
  stop_ = true;
  std::error_code ec;
  asio::ip::tcp::socket poke(ctx_);
  poke.connect(acceptor_.local_endpoint(), ec);
  thread_.join();
  // Connection threads are detached: wait until none uses this object any more.
  while (active_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

void FakeApiserver::set_token(const std::string& token, TokenRule rule) {
  std::lock_guard lock(mu_);
  tokens_[token] = std::move(rule);
}

std::string FakeApiserver::write_kubeconfig(const std::string& dir,
                                            const std::string& ca_file) const {
  std::string path = dir + "/apiserver.kubeconfig";
  std::ofstream f(path);
  f << "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n"
    << "    server: https://127.0.0.1:" << port_ << "\n"
    << "    certificate-authority: " << ca_file << "\n"
    << "users:\n- name: konnectivity-server\n  user:\n    token: " << caller_token_ << "\n"
    << "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: konnectivity-server\n"
    << "current-context: fake\n";
  return path;
}

std::string FakeApiserver::put_lease(const std::string& lease_namespace,
                                     const std::string& lease_json) {
  json doc = json::parse(lease_json);
  std::lock_guard lock(mu_);
  doc["metadata"]["namespace"] = lease_namespace;
  doc["metadata"]["resourceVersion"] = std::to_string(next_version_++);
  std::string name = doc["metadata"]["name"].get<std::string>();
  bool existed = leases_[lease_namespace].count(name) != 0;
  leases_[lease_namespace][name] = doc.dump();
  record_locked(lease_namespace, existed ? "MODIFIED" : "ADDED", leases_[lease_namespace][name]);
  return leases_[lease_namespace][name];
}

std::optional<std::string> FakeApiserver::lease(const std::string& lease_namespace,
                                                const std::string& name) const {
  std::lock_guard lock(mu_);
  auto ns = leases_.find(lease_namespace);
  if (ns == leases_.end()) return std::nullopt;
  auto it = ns->second.find(name);
  if (it == ns->second.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> FakeApiserver::lease_names(const std::string& lease_namespace) const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  if (auto ns = leases_.find(lease_namespace); ns != leases_.end()) {
    for (const auto& [name, doc] : ns->second) out.push_back(name);
  }
  return out;
}

void FakeApiserver::delete_lease(const std::string& lease_namespace, const std::string& name) {
  std::lock_guard lock(mu_);
  auto& store = leases_[lease_namespace];
  auto it = store.find(name);
  if (it == store.end()) return;
  json doc = json::parse(it->second);
  store.erase(it);
  doc["metadata"]["resourceVersion"] = std::to_string(next_version_++);
  record_locked(lease_namespace, "DELETED", doc.dump());
}

void FakeApiserver::record_locked(const std::string& ns, const char* type,
                                  const std::string& object) {
  json doc = json::parse(object);
  uint64_t version = std::stoull(doc["metadata"].value("resourceVersion", std::string("0")));
  events_.push_back(Event{ns, type, object, version});
  changed_.notify_all();
}

void FakeApiserver::break_watches() {
  std::lock_guard lock(mu_);
  ++watch_generation_;
  changed_.notify_all();
}

void FakeApiserver::compact() {
  std::lock_guard lock(mu_);
  events_.clear();
  compacted_ = next_version_ - 1;
}

template <typename Stream>
void FakeApiserver::stream_watch(Stream& s, const Request& r, const std::string& ns) {
  ++open_watches_;
  struct Closed {
    std::atomic<int>& n;
    ~Closed() { --n; }
  } closed{open_watches_};
  std::error_code ec;
  auto chunk = [&](const std::string& text) {
    std::string data = text + "\n";
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    asio::write(s, asio::buffer(size + data + "\r\n"), ec);
    return !ec;
  };
  auto event = [](const std::string& type, const json& object) {
    return json{{"type", type}, {"object", object}}.dump();
  };
  std::string head =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
      "Connection: close\r\n\r\n";
  asio::write(s, asio::buffer(head), ec);
  if (ec) return;
  auto query = [&](const char* key) {
    auto it = r.query.find(key);
    return it == r.query.end() ? std::string() : it->second;
  };
  std::string selector = query("labelSelector");
  bool bookmarks = query("allowWatchBookmarks") == "true";
  int timeout = query("timeoutSeconds").empty() ? 1800 : std::stoi(query("timeoutSeconds"));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout);
  auto matches = [&](const std::string& object) {
    json doc = json::parse(object);
    return selector_matches(selector, doc["metadata"].value("labels", json::object()));
  };
  std::unique_lock lock(mu_);
  uint64_t from = query("resourceVersion").empty() ? 0 : std::stoull(query("resourceVersion"));
  std::vector<std::string> out;
  if (from == 0) {
    // "Any version": the current objects, as ADDED, then what follows.
    for (const auto& [name, text] : leases_[ns]) {
      if (matches(text)) out.push_back(event("ADDED", json::parse(text)));
    }
    from = next_version_ - 1;
  } else if (from < compacted_ || expire_watches.fetch_sub(1) > 0) {
    lock.unlock();
    json status = {{"kind", "Status"},    {"apiVersion", "v1"},
                   {"status", "Failure"}, {"reason", "Expired"},
                   {"code", 410},         {"message", "too old resource version"}};
    if (chunk(event("ERROR", status))) asio::write(s, asio::buffer(std::string("0\r\n\r\n")), ec);
    return;
  }
  uint64_t generation = watch_generation_;
  auto next_bookmark = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (;;) {
    for (const auto& e : events_) {
      if (e.version > from && e.ns == ns && matches(e.object)) {
        out.push_back(event(e.type, json::parse(e.object)));
      }
      if (e.version > from && e.ns == ns) from = std::max(from, e.version);
    }
    auto now = std::chrono::steady_clock::now();
    if (bookmarks && now >= next_bookmark) {
      from = std::max(from, next_version_ - 1);
      out.push_back(event("BOOKMARK", {{"kind", "Lease"},
                                       {"apiVersion", "coordination.k8s.io/v1"},
                                       {"metadata", {{"resourceVersion", std::to_string(from)}}}}));
      next_bookmark = now + std::chrono::seconds(1);
    }
    lock.unlock();
    for (const auto& text : out) {
      if (!chunk(text)) return;
    }
    out.clear();
    if (now >= deadline) {
      asio::write(s, asio::buffer(std::string("0\r\n\r\n")), ec);  // the apiserver's end
      return;
    }
    lock.lock();
    changed_.wait_for(lock, std::chrono::milliseconds(100));
    if (stop_ || lease_outage || generation != watch_generation_) {
      lock.unlock();
      // Cut mid-stream: no last chunk, no TLS close_notify.
      s.lowest_layer().close(ec);
      return;
    }
  }
}

int FakeApiserver::lease_calls(const std::string& verb) const {
  std::lock_guard lock(mu_);
  auto it = lease_calls_.find(verb);
  return it == lease_calls_.end() ? 0 : it->second;
}

void FakeApiserver::serve(asio::ip::tcp::socket socket) {
  asio::ssl::stream<asio::ip::tcp::socket> s(std::move(socket), tls_);
  std::error_code ec;
  s.handshake(asio::ssl::stream_base::server, ec);
  if (ec) return;
  using core::http::Http1Parser;
  Http1Parser parser(Http1Parser::Kind::Request);
  Request r;
  char buf[16 * 1024];
  for (bool complete = false; !complete;) {
    size_t n = s.read_some(asio::buffer(buf), ec);
    if (ec) return;
    auto res = parser.feed(std::string_view(buf, n));
    if (res.status == Http1Parser::Status::Invalid) return;
    for (auto piece : res.body) r.body.append(piece);
    complete = res.status == Http1Parser::Status::MessageComplete;
  }
  r.head = parser.head();
  r.method = r.head.method;
  const std::string& target = r.head.target;
  auto qmark = target.find('?');
  r.path = target.substr(0, qmark);
  if (qmark != std::string::npos) {
    std::string q = target.substr(qmark + 1);
    size_t start = 0;
    while (start <= q.size()) {
      size_t amp = q.find('&', start);
      std::string kv = q.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
      auto eq = kv.find('=');
      if (eq != std::string::npos)
        r.query[url_decode(kv.substr(0, eq))] = url_decode(kv.substr(eq + 1));
      if (amp == std::string::npos) break;
      start = amp + 1;
    }
  }

  std::pair<int, std::string> answer{404, status_body(404, "NotFound", "no such path")};
  const std::string* authorization = r.head.find("Authorization");
  bool authorized = authorization != nullptr && *authorization == "Bearer " + caller_token_;
  bool is_review = r.method == "POST" && r.path == "/apis/authentication.k8s.io/v1/tokenreviews";
  bool is_lease = r.path.rfind(kLeasePrefix, 0) == 0;
  // A watch: GET <prefix><ns>/leases?watch=1.
  std::string watch_ns;
  if (auto w = r.query.find("watch"); is_lease && r.method == "GET" && w != r.query.end() &&
                                      (w->second == "1" || w->second == "true")) {
    std::string rest = r.path.substr(kLeasePrefix.size());
    auto slash = rest.find('/');
    if (slash != std::string::npos && rest.substr(slash + 1) == "leases") {
      watch_ns = url_decode(rest.substr(0, slash));
    }
  }
  if (is_review) ++reviews_;
  if (is_review || is_lease) {
    std::lock_guard lock(mu_);
    (is_review ? review_times_ : lease_times_).push_back(std::chrono::steady_clock::now());
  }
  if ((is_review || is_lease) && !authorized) {
    ++unauthorized_;
    answer = {401, status_body(401, "Unauthorized", "Unauthorized")};
  } else if (!watch_ns.empty()) {
    {
      std::lock_guard lock(mu_);
      ++lease_calls_["watch"];
    }
    if (lease_outage) {
      answer = {503, status_body(503, "ServiceUnavailable", "the apiserver is down for the test")};
    } else if (refuse_watches) {
      answer = {403, status_body(403, "Forbidden",
                                 "leases.coordination.k8s.io is forbidden: "
                                 "cannot watch resource \"leases\"")};
    } else {
      stream_watch(s, r, watch_ns);
      return;
    }
  } else if (is_review) {
    answer = review(r);
  } else if (is_lease) {
    answer = leases(r);
  }
  std::string rsp = "HTTP/1.1 " + std::to_string(answer.first) +
                    " X\r\nContent-Type: application/json\r\nContent-Length: " +
                    std::to_string(answer.second.size()) + "\r\nConnection: close\r\n\r\n" +
                    answer.second;
  asio::write(s, asio::buffer(rsp), ec);
  s.shutdown(ec);
}

std::vector<std::chrono::steady_clock::time_point> FakeApiserver::call_times(bool reviews) const {
  std::lock_guard lock(mu_);
  return reviews ? review_times_ : lease_times_;
}

std::pair<int, std::string> FakeApiserver::review(const Request& r) {
  auto doc = json::parse(r.body, nullptr, false);
  std::string token;
  if (!doc.is_discarded() && doc.contains("spec") && doc["spec"].is_object()) {
    token = doc["spec"].value("token", std::string());
  }
  TokenRule rule;
  {
    std::lock_guard lock(mu_);
    if (auto it = tokens_.find(token); it != tokens_.end()) rule = it->second;
  }
  json status;
  switch (rule.answer) {
    case Answer::ServerError:
      return {500, R"({"kind":"Status","code":500,"message":"etcd is on fire"})"};
    case Answer::Slow: {
      auto until = std::chrono::steady_clock::now() + slow_delay;
      while (!stop_ && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      status = {{"authenticated", true}, {"user", {{"username", rule.username}}}};
      break;
    }
    case Answer::Authenticated:
      status = {{"authenticated", true}, {"user", {{"username", rule.username}}}};
      break;
    case Answer::Unauthenticated:
      status = {{"authenticated", false}, {"error", "token is not valid"}};
      break;
  }
  json out = {
      {"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenReview"}, {"status", status}};
  return {201, out.dump()};
}

std::pair<int, std::string> FakeApiserver::leases(const Request& r) {
  // /apis/coordination.k8s.io/v1/namespaces/<ns>/leases[/<name>]
  std::string rest = r.path.substr(kLeasePrefix.size());
  auto slash = rest.find('/');
  if (slash == std::string::npos) return {404, status_body(404, "NotFound", "bad path")};
  std::string ns = url_decode(rest.substr(0, slash));
  rest = rest.substr(slash + 1);
  std::string name;
  if (rest.rfind("leases/", 0) == 0) {
    name = url_decode(rest.substr(7));
  } else if (rest != "leases") {
    return {404, status_body(404, "NotFound", "bad path")};
  }
  std::string verb = r.method == "POST"                  ? "create"
                     : r.method == "PUT"                 ? "update"
                     : r.method == "DELETE"              ? "delete"
                     : r.method == "GET" && name.empty() ? "list"
                     : r.method == "GET"                 ? "get"
                                                         : r.method;
  std::lock_guard lock(mu_);
  ++lease_calls_[verb];
  if (verb == "list") {
    auto rv = r.query.find("resourceVersion");
    if (rv != r.query.end() && rv->second == "0") ++lease_calls_["list-from-cache"];
  }
  if (lease_outage) {
    return {503, status_body(503, "ServiceUnavailable", "the apiserver is down for the test")};
  }
  auto& store = leases_[ns];
  auto not_found = [&] {
    return std::pair<int, std::string>{
        404, status_body(404, "NotFound", "leases.coordination.k8s.io \"" + name + "\" not found")};
  };
  if (verb == "get") {
    auto it = store.find(name);
    if (it == store.end()) return not_found();
    return {200, it->second};
  }
  if (verb == "list") {
    std::string selector;
    if (auto it = r.query.find("labelSelector"); it != r.query.end()) selector = it->second;
    json items = json::array();
    for (const auto& [n, text] : store) {
      json doc = json::parse(text);
      json labels = doc["metadata"].value("labels", json::object());
      if (selector_matches(selector, labels)) items.push_back(std::move(doc));
    }
    json list = {{"kind", "LeaseList"},
                 {"apiVersion", "coordination.k8s.io/v1"},
                 {"metadata", {{"resourceVersion", std::to_string(next_version_ - 1)}}},
                 {"items", std::move(items)}};
    return {200, list.dump()};
  }
  if (verb == "create" || verb == "update") {
    json doc = json::parse(r.body, nullptr, false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("metadata") ||
        !doc["metadata"].is_object()) {
      return {400, status_body(400, "BadRequest", "not a Lease")};
    }
    std::string doc_name = doc["metadata"].value("name", std::string());
    if (verb == "create") {
      name = doc_name;
      if (name.empty()) return {422, status_body(422, "Invalid", "metadata.name: Required")};
      if (store.count(name) != 0) {
        return {409, status_body(409, "AlreadyExists",
                                 "leases.coordination.k8s.io \"" + name + "\" already exists")};
      }
    } else {
      if (doc_name != name) return {400, status_body(400, "BadRequest", "name mismatch")};
      auto it = store.find(name);
      if (it == store.end()) return not_found();
      std::string want = doc["metadata"].value("resourceVersion", std::string());
      std::string have = json::parse(it->second)["metadata"].value("resourceVersion", "");
      if (!want.empty() && want != have) {
        return {409, status_body(409, "Conflict",
                                 "Operation cannot be fulfilled on leases.coordination.k8s.io \"" +
                                     name + "\": the object has been modified")};
      }
    }
    doc["metadata"]["namespace"] = ns;
    doc["metadata"]["resourceVersion"] = std::to_string(next_version_++);
    store[name] = doc.dump();
    record_locked(ns, verb == "create" ? "ADDED" : "MODIFIED", store[name]);
    return {verb == "create" ? 201 : 200, store[name]};
  }
  if (verb == "delete") {
    auto it = store.find(name);
    if (it == store.end()) return not_found();
    auto options = json::parse(r.body.empty() ? "{}" : r.body, nullptr, false);
    if (!options.is_discarded() && options.contains("preconditions")) {
      std::string want = options["preconditions"].value("resourceVersion", std::string());
      std::string have = json::parse(it->second)["metadata"].value("resourceVersion", "");
      if (!want.empty() && want != have) {
        return {409, status_body(409, "Conflict", "precondition failed: resourceVersion")};
      }
    }
    json gone = json::parse(it->second);
    store.erase(it);
    gone["metadata"]["resourceVersion"] = std::to_string(next_version_++);
    record_locked(ns, "DELETED", gone.dump());
    json ok = {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Success"}};
    return {200, ok.dump()};
  }
  return {405, status_body(405, "MethodNotAllowed", "method not allowed")};
}

}  // namespace konn::testsupport
