#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/admin/admin_server.h"
#include "core/admin/certificate_gauges.h"
#include "proxy-server/server_options.h"

namespace konn::server {

class Router;

// The proxy-server's /status.json and /status (admin port only; docs/deploy.md "Monitoring"):
// agents (a page of them, sorted by id), the longest-lived and busiest tunnels (top N), the
// recent dial failures, the limits and how close each is, the certificates, the version and the
// settings. Built on the admin listener's thread from atomics and short copies under the tables'
// own locks: no data-path thread waits for it, and no data-path thread is asked to do anything.
// core/admin/status_page serves it, reusing a body for a second.
//
// Query (both paths): `agents_offset` (default 0), `agents_limit` (default 100, at most 1000),
// `tunnels` (top N, default 20, at most 200).
class ServerStatus {
 public:
  ServerStatus(Router& router, const ServerOptions& options,
               const core::admin::CertificateGauges& certificates, std::function<bool()> draining);

  nlohmann::ordered_json build(const std::string& query) const;

 private:
  Router& router_;
  const ServerOptions& options_;
  const core::admin::CertificateGauges& certificates_;
  std::function<bool()> draining_;
  const std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();
};

}  // namespace konn::server
