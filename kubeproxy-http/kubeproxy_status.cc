#include "kubeproxy-http/kubeproxy_status.h"

#include <algorithm>

#include "core/admin/status_page.h"
#include "core/admin/top_n.h"
#include "core/config/duration.h"
#include "core/net/url_escape.h"

#ifndef KONN_VERSION
#define KONN_VERSION "unknown"
#endif

namespace konn::kubeproxy {

std::string apiserver_address(const RestConfig& rest) {
  bool v6 = rest.host.find(':') != std::string::npos;
  return rest.scheme + "://" + (v6 ? "[" + rest.host + "]" : rest.host) + ":" +
         std::to_string(rest.port) + rest.path;
}

std::shared_ptr<LiveConnection> ConnectionTracker::open(std::string peer) {
  auto* raw = new LiveConnection;
  raw->peer = std::move(peer);
  std::shared_ptr<LiveConnection> c(raw, [this](LiveConnection* p) {
    close(p);
    delete p;
  });
  std::lock_guard lock(mu_);
  open_[raw] = c;
  return c;
}

void ConnectionTracker::close(const LiveConnection* c) {
  std::lock_guard lock(mu_);
  open_.erase(c);
}

std::vector<std::shared_ptr<const LiveConnection>> ConnectionTracker::snapshot() const {
  std::vector<std::shared_ptr<const LiveConnection>> out;
  std::lock_guard lock(mu_);
  out.reserve(open_.size());
  for (const auto& [raw, weak] : open_) {
    if (auto c = weak.lock()) out.push_back(std::move(c));
  }
  return out;
}

nlohmann::ordered_json KubeproxyStatus::build(const std::string& query) const {
  using Json = nlohmann::ordered_json;
  using core::admin::rfc3339;
  const auto q = core::admin::parse_query(query);
  const auto top_n = static_cast<size_t>(core::admin::query_int(q, "connections", 20, 0, 200));
  const auto now = std::chrono::steady_clock::now();
  const auto wall = std::chrono::system_clock::now();

  struct Row {
    std::string peer;
    std::string request;
    std::string destination;
    std::string via;
    double age = 0;
    uint64_t up = 0;
    uint64_t down = 0;
    uint64_t requests = 0;
  };
  std::vector<Row> rows;
  {
    auto open = tracker_.snapshot();
    rows.reserve(open.size());
    for (const auto& c : open) {
      Row r;
      r.peer = c->peer;
      {
        std::lock_guard lock(c->mu);
        r.request = c->request.empty() ? "-" : c->request;
        r.destination = c->destination.empty() ? "-" : c->destination;
        r.via = c->via.empty() ? "-" : c->via;
      }
      r.age = std::chrono::duration<double>(now - c->start).count();
      r.up = c->bytes_up.load(std::memory_order_relaxed);
      r.down = c->bytes_down.load(std::memory_order_relaxed);
      r.requests = c->requests.load(std::memory_order_relaxed);
      rows.push_back(std::move(r));
    }
  }
  auto top = [&rows, top_n](auto better) {
    Json out = Json::array();
    for (const Row* r : core::admin::best_of(rows, top_n, better)) {
      out.push_back({{"client", r->peer},
                     {"request", r->request},
                     {"destination", r->destination},
                     {"via", r->via},
                     {"age_seconds", r->age},
                     {"requests", r->requests},
                     {"bytes_up", r->up},
                     {"bytes_down", r->down}});
    }
    return out;
  };
  Json longest = top([](const Row& a, const Row& b) { return a.age > b.age; });
  Json busiest = top([](const Row& a, const Row& b) { return a.up + a.down > b.up + b.down; });

  const uint64_t failures_total = tracker_.failures().total();
  auto recent = tracker_.failures().snapshot();
  Json failures = Json::array();
  for (auto it = recent.rbegin(); it != recent.rend(); ++it) {
    failures.push_back({{"at", rfc3339(it->at)},
                        {"client", it->peer},
                        {"request", it->request},
                        {"destination", it->destination},
                        {"status", it->status},
                        {"reason", it->reason}});
  }

  using core::config::format_go_duration;
  const auto& k = options_.kube;
  Json out;
  out["generated_at"] = rfc3339(wall);
  out["summary"] = {{"daemon", "kubeproxy-http"},
                    {"version", KONN_VERSION},
                    {"mode", options_.mode},
                    {"started_at", rfc3339(started_)},
                    {"open_connections", rows.size()},
                    {"upstream", options_.mode == "proxy"          ? "apiserver"
                                 : options_.konnectivity.enabled() ? "konnectivity"
                                                                   : "direct"},
                    {"apiserver", apiserver_},
                    {"failures_total", failures_total}};
  out["connections"] = {{"open", rows.size()},
                        {"top", top_n},
                        {"longest_lived", std::move(longest)},
                        {"busiest", std::move(busiest)}};
  out["failures"] = {{"total", failures_total},
                     {"kept", ConnectionTracker::kFailuresKept},
                     {"recent", std::move(failures)}};
  // kubeproxy-http has no connection cap of its own: the head size and time bounds are its
  // limits, shown with the flags.
  out["limits"] = Json::array();
  out["certificates"] = core::admin::certificates_json(certificates_);
  // Settings without secrets: --token, --proxy-user and --require-token only say whether they
  // are set; kubeconfig and key files by path only.
  auto set = [](const std::string& v) { return v.empty() ? "" : "(set)"; };
  out["flags"] = {{"mode", options_.mode},
                  {"address", options_.address},
                  {"port", options_.port},
                  {"unix-socket", options_.unix_socket},
                  {"api-prefix", options_.api_prefix},
                  {"accept-paths", options_.accept_paths},
                  {"reject-paths", options_.reject_paths},
                  {"accept-hosts", options_.accept_hosts},
                  {"reject-methods", options_.reject_methods},
                  {"disable-filter", options_.disable_filter},
                  {"kubeconfig", k.kubeconfig},
                  {"context", k.context},
                  {"cluster", k.cluster},
                  {"user", k.user},
                  {"server", core::net::redact_url_credentials(k.server)},
                  {"token", set(k.token)},
                  {"certificate-authority", k.certificate_authority},
                  {"client-certificate", k.client_certificate},
                  {"client-key", k.client_key},
                  {"insecure-skip-tls-verify", k.insecure_skip_tls_verify},
                  {"as", k.as},
                  {"as-group", k.as_groups},
                  {"allowed-destinations", options_.allowed_destinations},
                  {"proxy-user", set(options_.proxy_user)},
                  {"require-token", set(options_.require_token)},
                  {"strip-client-credentials", options_.strip_client_credentials},
                  {"dial-timeout", format_go_duration(options_.dial_timeout)},
                  {"request-header-timeout", format_go_duration(options_.request_header_timeout)},
                  {"max-header-bytes", options_.max_header_bytes},
                  {"half-close-timeout", format_go_duration(options_.half_close_timeout)},
                  {"tls-cert-file", options_.tls_cert_file},
                  {"tls-private-key-file", options_.tls_key_file},
                  {"client-ca-file", options_.client_ca_file},
                  {"workers", options_.workers},
                  {"health-port", options_.effective_health_port()},
                  {"health-bind-address", options_.effective_health_bind_address()},
                  {"status-page-off-loopback", options_.status_page_off_loopback},
                  {"konnectivity-address", options_.konnectivity.address},
                  {"konnectivity-mode", options_.konnectivity.mode}};
  return out;
}

}  // namespace konn::kubeproxy
