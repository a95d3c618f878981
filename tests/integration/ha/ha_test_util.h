#pragma once

#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "test-client/tunnel.h"

namespace konn::e2e {

// Dials `address` through `channel` and checks one echo round trip; returns the open tunnel.
inline std::unique_ptr<testclient::Tunnel> echo_tunnel(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& address,
    const std::string& payload = "ping through the tunnel") {
  auto d = testclient::Tunnel::dial(channel, address, std::chrono::seconds(10));
  INFO("dial error: " << d.error);
  REQUIRE(d.tunnel);
  REQUIRE(d.tunnel->write(payload));
  std::string got;
  while (got.size() < payload.size()) {
    std::string chunk;
    REQUIRE(d.tunnel->read_for(&chunk, std::chrono::seconds(10)) ==
            testclient::Tunnel::ReadStatus::Data);
    got += chunk;
  }
  CHECK(got == payload);
  return std::move(d.tunnel);
}

}  // namespace konn::e2e
