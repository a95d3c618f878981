#pragma once

#include <chrono>
#include <string>

#include "core/log/recent_events.h"

namespace konn::server {

// One failed or refused dial, as the status page lists it.
struct DialFailure {
  std::chrono::system_clock::time_point at;
  std::string reason;       // dial_failure_count's reason, or "limit:<limit>" for a refusal
  std::string agent;        // agent id; empty when no agent was chosen
  std::string destination;  // the DIAL_REQ's address
  std::string error;        // what the agent or the server answered, if anything
};

// The proxy-server's last dial failures (64 kept), newest last.
using DialFailureLog = core::log::RecentEvents<DialFailure>;
inline constexpr size_t kDialFailuresKept = 64;

}  // namespace konn::server
