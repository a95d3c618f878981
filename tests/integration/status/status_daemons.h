#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/support/http_get.h"
#include "tests/support/process_runner.h"

namespace konn::e2e {

// A daemon started from the build's bin dir; REQUIREs its health port to accept.
inline std::unique_ptr<konn::testsupport::Process> start_status_daemon(
    const std::string& binary, std::vector<std::string> args, uint16_t health) {
  konn::testsupport::ProcessOptions o;
  o.binary = binary;
  o.args = std::move(args);
  auto p = std::make_unique<konn::testsupport::Process>(std::move(o));
  INFO(binary << " log:\n" << p->log());
  REQUIRE(p->wait_for_tcp_port(health, std::chrono::seconds(20)));
  return p;
}

// A daemon whose health (or admin) listener on `port` is bound beyond loopback without
// --status-page-off-loopback: /status and /status.json answer 403 naming the flag, /metrics 200.
inline void check_status_page_refused(uint16_t port) {
  auto refused = konn::testsupport::http_get_local(port, "/status.json");
  CHECK(refused.status == 403);
  CHECK(refused.body.find("--status-page-off-loopback") != std::string::npos);
  CHECK(konn::testsupport::http_get_local(port, "/status").status == 403);
  CHECK(konn::testsupport::http_get_local(port, "/metrics").status == 200);
}

}  // namespace konn::e2e
