#include "core/kube/lease.h"

#include <cctype>
#include <cstdio>
#include <time.h>

#include <nlohmann/json.hpp>

namespace konn::core::kube {
namespace {

using nlohmann::json;

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.';
}

// A label name or value: at most 63 characters, alphanumeric at both ends, [-_.a-zA-Z0-9] within.
bool valid_label_name(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (std::isalnum(static_cast<unsigned char>(s.front())) == 0 ||
      std::isalnum(static_cast<unsigned char>(s.back())) == 0) {
    return false;
  }
  for (char c : s) {
    if (!name_char(c)) return false;
  }
  return true;
}

// A DNS subdomain (label key prefix): lowercase alphanumerics, '-' and '.', at most 253.
bool valid_dns_subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    if (!ok) return false;
  }
  return s.front() != '-' && s.front() != '.' && s.back() != '-' && s.back() != '.';
}

bool valid_label_key(std::string_view key) {
  auto slash = key.find('/');
  if (slash == std::string_view::npos) return valid_label_name(key);
  return valid_dns_subdomain(key.substr(0, slash)) && valid_label_name(key.substr(slash + 1));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

std::optional<SystemTime> time_field(const json& spec, const char* key) {
  auto it = spec.find(key);
  if (it == spec.end() || !it->is_string()) return std::nullopt;
  return parse_rfc3339(it->get<std::string>());
}

std::optional<Lease> lease_from(const json& doc) {
  if (!doc.is_object()) return std::nullopt;
  auto meta = doc.find("metadata");
  if (meta == doc.end() || !meta->is_object()) return std::nullopt;
  Lease l;
  l.name = meta->value("name", std::string());
  if (l.name.empty()) return std::nullopt;
  l.resource_version = meta->value("resourceVersion", std::string());
  if (auto labels = meta->find("labels"); labels != meta->end() && labels->is_object()) {
    for (auto& [k, v] : labels->items()) {
      if (v.is_string()) l.labels[k] = v.get<std::string>();
    }
  }
  auto spec = doc.find("spec");
  if (spec != doc.end() && spec->is_object()) {
    if (auto h = spec->find("holderIdentity"); h != spec->end() && h->is_string()) {
      l.holder_identity = h->get<std::string>();
    }
    if (auto d = spec->find("leaseDurationSeconds"); d != spec->end() && d->is_number_integer()) {
      l.lease_duration_seconds = d->get<int>();
    }
    l.acquire_time = time_field(*spec, "acquireTime");
    l.renew_time = time_field(*spec, "renewTime");
  }
  return l;
}

}  // namespace

std::string format_micro_time(SystemTime t) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  time_t secs = static_cast<time_t>(us / 1000000);
  long frac = static_cast<long>(us % 1000000);
  if (frac < 0) {
    frac += 1000000;
    --secs;
  }
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return buf;
}

std::optional<SystemTime> parse_rfc3339(std::string_view s) {
  auto digits = [&](size_t pos, size_t n, int* out) {
    if (pos + n > s.size()) return false;
    int v = 0;
    for (size_t i = pos; i < pos + n; ++i) {
      if (std::isdigit(static_cast<unsigned char>(s[i])) == 0) return false;
      v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
  };
  int year = 0, mon = 0, day = 0, hour = 0, min = 0, sec = 0;
  if (!digits(0, 4, &year) || s.size() < 20 || s[4] != '-' || !digits(5, 2, &mon) || s[7] != '-' ||
      !digits(8, 2, &day) || (s[10] != 'T' && s[10] != 't') || !digits(11, 2, &hour) ||
      s[13] != ':' || !digits(14, 2, &min) || s[16] != ':' || !digits(17, 2, &sec)) {
    return std::nullopt;
  }
  if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60) {
    return std::nullopt;
  }
  size_t pos = 19;
  int64_t micros = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    size_t start = pos;
    int64_t scale = 100000;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos])) != 0) {
      if (scale > 0) micros += (s[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == start) return std::nullopt;
  }
  int offset_minutes = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh = 0, om = 0;
    if (!digits(pos + 1, 2, &oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !digits(pos + 4, 2, &om)) {
      return std::nullopt;
    }
    offset_minutes = (oh * 60 + om) * (s[pos] == '+' ? 1 : -1);
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != s.size()) return std::nullopt;
  struct tm tm {};
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = sec;
  time_t secs = timegm(&tm);
  secs -= static_cast<time_t>(offset_minutes) * 60;
  return SystemTime(std::chrono::duration_cast<SystemTime::duration>(
      std::chrono::seconds(secs) + std::chrono::microseconds(micros)));
}

std::string lease_to_json(const Lease& lease, const std::string& lease_namespace) {
  json meta = {{"name", lease.name}, {"namespace", lease_namespace}};
  if (!lease.resource_version.empty()) meta["resourceVersion"] = lease.resource_version;
  if (!lease.labels.empty()) meta["labels"] = lease.labels;
  json spec = json::object();
  if (!lease.holder_identity.empty()) spec["holderIdentity"] = lease.holder_identity;
  if (lease.lease_duration_seconds) spec["leaseDurationSeconds"] = *lease.lease_duration_seconds;
  if (lease.acquire_time) spec["acquireTime"] = format_micro_time(*lease.acquire_time);
  if (lease.renew_time) spec["renewTime"] = format_micro_time(*lease.renew_time);
  json doc = {{"apiVersion", "coordination.k8s.io/v1"},
              {"kind", "Lease"},
              {"metadata", std::move(meta)},
              {"spec", std::move(spec)}};
  return doc.dump();
}

std::optional<Lease> parse_lease(std::string_view body) {
  auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded()) return std::nullopt;
  return lease_from(doc);
}

std::optional<std::vector<Lease>> parse_lease_list(std::string_view body,
                                                   std::string* resource_version) {
  auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
  if (resource_version != nullptr) {
    resource_version->clear();
    if (auto meta = doc.find("metadata"); meta != doc.end() && meta->is_object()) {
      *resource_version = meta->value("resourceVersion", std::string());
    }
  }
  auto items = doc.find("items");
  if (items == doc.end()) return std::vector<Lease>{};  // an empty list may omit items
  if (!items->is_array()) return std::nullopt;
  std::vector<Lease> out;
  for (const auto& item : *items) {
    auto l = lease_from(item);
    if (!l) return std::nullopt;
    out.push_back(std::move(*l));
  }
  return out;
}

std::string status_reason(std::string_view body) {
  auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return {};
  auto r = doc.find("reason");
  return r != doc.end() && r->is_string() ? r->get<std::string>() : std::string();
}

std::optional<LeaseEvent> parse_lease_event(std::string_view text) {
  auto doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
  auto type = doc.find("type");
  auto object = doc.find("object");
  if (type == doc.end() || !type->is_string() || object == doc.end() || !object->is_object()) {
    return std::nullopt;
  }
  LeaseEvent e;
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "ERROR") {
    e.type = LeaseEvent::Type::Error;
    if (auto c = object->find("code"); c != object->end() && c->is_number_integer()) {
      e.code = c->get<int>();
    }
    e.reason = object->value("reason", std::string());
    e.message = object->value("message", std::string());
    return e;
  }
  if (auto meta = object->find("metadata"); meta != object->end() && meta->is_object()) {
    e.resource_version = meta->value("resourceVersion", std::string());
  }
  if (t == "BOOKMARK") {
    e.type = LeaseEvent::Type::Bookmark;
    return e;
  }
  if (t == "ADDED") {
    e.type = LeaseEvent::Type::Added;
  } else if (t == "MODIFIED") {
    e.type = LeaseEvent::Type::Modified;
  } else if (t == "DELETED") {
    e.type = LeaseEvent::Type::Deleted;
  } else {
    return std::nullopt;
  }
  e.lease = lease_from(*object);
  if (!e.lease) return std::nullopt;
  return e;
}

bool lease_valid(const Lease& lease, SystemTime now) {
  if (!lease.lease_duration_seconds) return false;
  std::optional<SystemTime> last = lease.renew_time ? lease.renew_time : lease.acquire_time;
  if (!last) return false;
  return *last + std::chrono::seconds(*lease.lease_duration_seconds) > now;
}

Labels parse_label_set(std::string_view text, std::vector<std::string>* errors,
                       std::vector<std::string>* warnings) {
  Labels out;
  text = trim(text);
  if (text.empty()) return out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string_view item = trim(text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    auto eq = item.find('=');
    if (eq == std::string_view::npos) {
      errors->push_back("label \"" + std::string(item) + "\": want key=value");
    } else {
      std::string_view key = trim(item.substr(0, eq));
      std::string_view value = trim(item.substr(eq + 1));
      if ((!value.empty() && value.front() == '=') || (!key.empty() && key.back() == '!')) {
        errors->push_back("label \"" + std::string(item) + "\": a label set takes key=value");
      } else if (!valid_label_key(key)) {
        errors->push_back("label key \"" + std::string(key) + "\" is not a valid label key");
      } else if (!value.empty() && !valid_label_name(value)) {
        errors->push_back("label value \"" + std::string(value) + "\" is not a valid label value");
      } else {
        auto [it, added] = out.insert_or_assign(std::string(key), std::string(value));
        if (!added && warnings != nullptr) {
          warnings->push_back("label key \"" + it->first + "\" given twice: the last value, \"" +
                              it->second + "\", is used");
        }
      }
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string format_label_set(const Labels& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    if (!out.empty()) out += ',';
    out += k + "=" + v;
  }
  return out;
}

std::string query_escape(std::string_view text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

LeaseClient::LeaseClient(ApiTarget target, std::string lease_namespace,
                         std::chrono::milliseconds timeout)
    : target_(std::move(target)), namespace_(std::move(lease_namespace)), timeout_(timeout) {}

std::string lease_collection_path(const std::string& lease_namespace) {
  // No namespace: every namespace's leases (upstream's agent with --lease-namespace="" lists
  // them so).
  if (lease_namespace.empty()) return "/apis/coordination.k8s.io/v1/leases";
  return "/apis/coordination.k8s.io/v1/namespaces/" + query_escape(lease_namespace) + "/leases";
}

std::string LeaseClient::collection() const { return lease_collection_path(namespace_); }

io::Awaitable<LeaseClient::Result> LeaseClient::call(asio::any_io_executor ex, std::string method,
                                                     std::string path, std::string body) const {
  Result r;
  auto start = std::chrono::steady_clock::now();
  r.response = co_await api_request(ex, target_, method, path, body, timeout_);
  r.latency = std::chrono::steady_clock::now() - start;
  if (r.response.status >= 400) r.reason = status_reason(r.response.body);
  co_return r;
}

io::Awaitable<LeaseClient::Result> LeaseClient::get(asio::any_io_executor ex,
                                                    const std::string& name) const {
  std::string method = "GET";
  std::string path = collection() + "/" + query_escape(name);
  std::string no_body;
  auto r = co_await call(ex, std::move(method), std::move(path), std::move(no_body));
  if (r.response.status == 200) r.lease = parse_lease(r.response.body);
  co_return r;
}

io::Awaitable<LeaseClient::Result> LeaseClient::create(asio::any_io_executor ex,
                                                       const Lease& lease) const {
  std::string method = "POST";
  std::string path = collection();
  std::string body = lease_to_json(lease, namespace_);
  auto r = co_await call(ex, std::move(method), std::move(path), std::move(body));
  if (r.response.status == 200 || r.response.status == 201) {
    r.lease = parse_lease(r.response.body);
  }
  co_return r;
}

io::Awaitable<LeaseClient::Result> LeaseClient::update(asio::any_io_executor ex,
                                                       const Lease& lease) const {
  std::string method = "PUT";
  std::string path = collection() + "/" + query_escape(lease.name);
  std::string body = lease_to_json(lease, namespace_);
  auto r = co_await call(ex, std::move(method), std::move(path), std::move(body));
  if (r.response.status == 200) r.lease = parse_lease(r.response.body);
  co_return r;
}

io::Awaitable<LeaseClient::Result> LeaseClient::list(asio::any_io_executor ex,
                                                     const std::string& selector,
                                                     bool from_cache) const {
  std::string path = collection();
  std::string sep = "?";
  if (!selector.empty()) {
    path += sep + "labelSelector=" + query_escape(selector);
    sep = "&";
  }
  if (from_cache) path += sep + "resourceVersion=0";
  std::string method = "GET";
  std::string no_body;
  auto r = co_await call(ex, std::move(method), std::move(path), std::move(no_body));
  if (r.response.status == 200) {
    if (auto items = parse_lease_list(r.response.body, &r.resource_version)) {
      r.items = std::move(*items);
    } else {
      r.response.error = "lease list answer is not a LeaseList";
    }
  }
  co_return r;
}

io::Awaitable<WatchEnd> LeaseClient::watch(asio::any_io_executor ex, const std::string& selector,
                                           const std::string& resource_version, int timeout_seconds,
                                           std::function<void(int)> on_answer,
                                           std::function<bool(const LeaseEvent&)> on_event) const {
  std::string path = collection() + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=" +
                     std::to_string(timeout_seconds);
  if (!resource_version.empty()) path += "&resourceVersion=" + query_escape(resource_version);
  if (!selector.empty()) path += "&labelSelector=" + query_escape(selector);
  WatchHandler handler;
  handler.on_answer = std::move(on_answer);
  handler.on_event = [on_event = std::move(on_event)](std::string_view text) {
    auto event = parse_lease_event(text);
    return !event || on_event(*event);  // an event of no use (an unknown type) is skipped
  };
  auto idle = std::chrono::seconds(timeout_seconds) + std::chrono::minutes(1);
  co_return co_await api_watch(ex, target_, path, std::move(handler), timeout_,
                               std::chrono::duration_cast<std::chrono::milliseconds>(idle));
}

io::Awaitable<LeaseClient::Result> LeaseClient::remove(asio::any_io_executor ex,
                                                       const std::string& name,
                                                       const std::string& resource_version) const {
  std::string body;
  if (!resource_version.empty()) {
    json options = {{"apiVersion", "v1"},
                    {"kind", "DeleteOptions"},
                    {"preconditions", {{"resourceVersion", resource_version}}}};
    body = options.dump();
  }
  std::string method = "DELETE";
  std::string path = collection() + "/" + query_escape(name);
  co_return co_await call(ex, std::move(method), std::move(path), std::move(body));
}

}  // namespace konn::core::kube
