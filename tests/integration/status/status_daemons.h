#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

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

}  // namespace konn::e2e
