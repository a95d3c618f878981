#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "core/admin/certificate_gauges.h"
#include "socks5/session.h"
#include "socks5/socks5_options.h"

namespace konn::socks5 {

// socks5's /status.json and /status (on the health listener; core/admin/status_page serves them):
// the open sessions (count; the longest-lived and the busiest, `?sessions=N`, 20 by default, at
// most 200, each with client, user-less destination, command, direct or through Konnectivity,
// age and bytes each way), the last failures (SOCKS reply code, destination, reason; a ring of
// SessionRegistry::kFailuresKept), the limits and how close each is, the certificates and the
// settings (the users file's path, never its contents). Built on the health listener's thread
// from the registry's handles (a copy of pointers under its lock) and relaxed atomics: no
// session thread does anything for it.
class Socks5Status {
 public:
  Socks5Status(const Socks5Options& options, const SessionRegistry& registry,
               const core::admin::CertificateGauges& certificates)
      : options_(options), registry_(registry), certificates_(certificates) {}
  nlohmann::ordered_json build(const std::string& query) const;

 private:
  const Socks5Options& options_;
  const SessionRegistry& registry_;
  const core::admin::CertificateGauges& certificates_;
  const std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();
};

}  // namespace konn::socks5
