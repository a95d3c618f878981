#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/admin/admin_server.h"
#include "core/admin/certificate_gauges.h"

namespace konn::core::admin {

// /status and /status.json of a daemon's admin port (every daemon's own builder fills the JSON;
// this file serves it). The HTML page carries the JSON inline and a small script (no external
// assets) that renders every section as tables and fetches /status.json again every few seconds
// with the same query. Each top-level key of the JSON becomes a <section id="KEY">; an array of
// objects (or an object's `items`) becomes a table whose rows carry data-key="<its id, flag,
// listener or name column, else its first>"; an object's scalars become a two-column table whose
// rows carry data-key="<key>".

// The page for `data`, titled `title`.
std::string status_html(const std::string& title, const nlohmann::ordered_json& data);

// Query parameters (`a=1&b=2`, no decoding beyond '+'); later keys win.
std::map<std::string, std::string> parse_query(const std::string& query);
// The integer value of `key`, clamped to [lo, hi]; `fallback` when absent or not a number.
int64_t query_int(const std::map<std::string, std::string>& q, const std::string& key,
                  int64_t fallback, int64_t lo, int64_t hi);

// Whether a listener bound to `address` is reachable only from this host ("127.0.0.1", "::1",
// "localhost", any 127/8 address). Empty (every address) is not.
bool is_loopback_bind(const std::string& address);

// Routes /status and /status.json on `admin`. When `bind_address` is not a loopback address and
// `allowed_off_loopback` is false, both answer 403 naming `flag`, the flag that turns them on.
// `build` runs on the admin thread and returns the JSON for a query.
void route_status(AdminServer& admin, const std::string& title, const std::string& bind_address,
                  bool allowed_off_loopback, const std::string& flag,
                  std::function<nlohmann::ordered_json(const std::string& query)> build);

// The "certificates" section: one row per entry (listener, kind, path, subject, not_after,
// expires_in_seconds, error), as every daemon's page shows it.
nlohmann::ordered_json certificates_json(const CertificateGauges& certificates);

// An RFC 3339 UTC time ("2026-12-07T12:00:00Z").
std::string rfc3339(std::chrono::system_clock::time_point t);

}  // namespace konn::core::admin
