#include "socks5/socks5_status.h"

#include <algorithm>

#include "core/admin/status_page.h"
#include "core/admin/top_n.h"
#include "core/config/duration.h"

#ifndef KONN_VERSION
#define KONN_VERSION "unknown"
#endif

namespace konn::socks5 {

using StatusJson = nlohmann::ordered_json;

StatusJson Socks5Status::build(const std::string& query) const {
  using core::admin::rfc3339;
  const auto q = core::admin::parse_query(query);
  const auto top_n = static_cast<size_t>(core::admin::query_int(q, "sessions", 20, 0, 200));
  const auto now = std::chrono::steady_clock::now();
  const auto wall = std::chrono::system_clock::now();

  size_t most_per_client = 0;
  auto handles = registry_.snapshot(&most_per_client);
  // One copy per session (its request fields under its own lock), then the two orders.
  struct Row {
    std::string client;
    std::string command;
    std::string destination;
    std::string via;
    double age = 0;
    uint64_t up = 0;
    uint64_t down = 0;
  };
  std::vector<Row> rows;
  rows.reserve(handles.size());
  for (const auto& h : handles) {
    Row r;
    r.client = h->client.to_string() + ":" + std::to_string(h->client_port);
    {
      std::lock_guard lock(h->mu);
      r.command = h->command.empty() ? "-" : h->command;
      r.destination = h->destination.empty() ? "-" : h->destination;
      r.via = h->via.empty() ? "-" : h->via;
    }
    r.age = std::chrono::duration<double>(now - h->start).count();
    r.up = h->bytes_up.load(std::memory_order_relaxed);
    r.down = h->bytes_down.load(std::memory_order_relaxed);
    rows.push_back(std::move(r));
  }
  handles.clear();
  auto top = [&rows, top_n](auto better) {
    StatusJson out = StatusJson::array();
    for (const Row* r : core::admin::best_of(rows, top_n, better)) {
      out.push_back({{"client", r->client},
                     {"command", r->command},
                     {"destination", r->destination},
                     {"via", r->via},
                     {"age_seconds", r->age},
                     {"bytes_up", r->up},
                     {"bytes_down", r->down}});
    }
    return out;
  };
  StatusJson longest = top([](const Row& a, const Row& b) { return a.age > b.age; });
  StatusJson busiest =
      top([](const Row& a, const Row& b) { return a.up + a.down > b.up + b.down; });

  const uint64_t failures_total = registry_.failures().total();
  auto recent = registry_.failures().snapshot();
  StatusJson failures = StatusJson::array();
  for (auto it = recent.rbegin(); it != recent.rend(); ++it) {
    std::string code = "-";
    if (it->reply_code >= 0 && it->reply_code < 256) {
      static constexpr char kHex[] = "0123456789abcdef";
      code = {kHex[it->reply_code >> 4], kHex[it->reply_code & 15]};
    }
    failures.push_back({{"at", rfc3339(it->at)},
                        {"client", it->client},
                        {"command", it->command},
                        {"destination", it->destination},
                        {"reply_code", code},
                        {"reply", it->reply},
                        {"reason", it->reason}});
  }

  auto limit = [](const char* flag, int64_t lim, int64_t used) {
    StatusJson j{{"flag", flag}, {"limit", lim}, {"used", used}};
    j["ratio"] = lim > 0 ? static_cast<double>(used) / static_cast<double>(lim) : 0.0;
    return j;
  };

  using core::config::format_go_duration;
  StatusJson out;
  out["generated_at"] = rfc3339(wall);
  out["summary"] = {{"daemon", "socks5"},
                    {"version", KONN_VERSION},
                    {"started_at", rfc3339(started_)},
                    {"open_sessions", rows.size()},
                    {"upstream", options_.konnectivity.enabled() ? "konnectivity" : "direct"},
                    {"failures_total", failures_total}};
  out["sessions"] = {{"open", rows.size()},
                     {"top", top_n},
                     {"longest_lived", std::move(longest)},
                     {"busiest", std::move(busiest)}};
  out["failures"] = {{"total", failures_total},
                     {"kept", SessionRegistry::kFailuresKept},
                     {"recent", std::move(failures)}};
  out["limits"] = StatusJson::array(
      {limit("--max-sessions", registry_.max_total(), static_cast<int64_t>(rows.size())),
       limit("--max-sessions-per-client", registry_.max_per_client(),
             static_cast<int64_t>(most_per_client))});
  out["certificates"] = core::admin::certificates_json(certificates_);
  // Settings only: the users file's path (never its contents), the certificate paths.
  const auto& k = options_.konnectivity;
  out["flags"] = {{"bind-address", options_.bind_address},
                  {"port", options_.port},
                  {"users-file", options_.users_file},
                  {"rule", options_.rules},
                  {"default-policy", options_.default_policy},
                  {"handshake-timeout", format_go_duration(options_.handshake_timeout)},
                  {"connect-timeout", format_go_duration(options_.connect_timeout)},
                  {"idle-timeout", format_go_duration(options_.idle_timeout)},
                  {"half-close-timeout", format_go_duration(options_.half_close_timeout)},
                  {"max-sessions", options_.max_sessions},
                  {"max-sessions-per-client", options_.max_sessions_per_client},
                  {"dns-servers", options_.dns_servers},
                  {"enable-bind", options_.enable_bind},
                  {"enable-udp", options_.enable_udp},
                  {"splice", options_.splice},
                  {"workers", options_.workers},
                  {"health-bind-address", options_.health_bind_address},
                  {"health-port", options_.health_port},
                  {"status-page-off-loopback", options_.status_page_off_loopback},
                  {"konnectivity-address", k.address},
                  {"konnectivity-mode", k.mode},
                  {"konnectivity-ca-cert", k.ca_cert},
                  {"konnectivity-client-cert", k.client_cert},
                  {"konnectivity-client-key", k.client_key},
                  {"konnectivity-server-name", k.server_name}};
  return out;
}

}  // namespace konn::socks5
