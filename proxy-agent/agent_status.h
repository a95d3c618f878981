#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/admin/certificate_gauges.h"
#include "proxy-agent/agent_options.h"
#include "proxy-agent/agent_stats.h"
#include "proxy-agent/server_set.h"

namespace konn::agent {

// The agent's /status.json and /status (admin port only; core/admin/status_page serves them):
// its servers (connected, since, tunnels, last error; and those it lost or could not reach), its
// tunnels (per server, the totals, and the longest-lived and busiest: `?tunnels=N`, 20 by
// default, at most 200), the dials it refused or could not make (counts and the
// last ones), the recent connection events, the limits, its certificates and its settings (the
// egress proxy's credentials redacted; file paths only). Built on the admin thread from atomics
// and short copies; no data-path thread does anything for it.
class AgentStatus {
 public:
  AgentStatus(const AgentOptions& options, const ServerSet& servers,
              std::shared_ptr<const AgentStats> stats,
              const core::admin::CertificateGauges& certificates);
  nlohmann::ordered_json build(const std::string& query) const;

 private:
  const AgentOptions& options_;
  const ServerSet& servers_;
  std::shared_ptr<const AgentStats> stats_;
  const core::admin::CertificateGauges& certificates_;
  const std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();
};

}  // namespace konn::agent
