#include "proxy-server/status/server_status.h"

#include <chrono>
#include <memory>
#include <vector>

#include <asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "proxy-server/backend/backend.h"
#include "proxy-server/tunnel/router.h"

using namespace konn::server;

TEST_CASE("server status: 20 000 agent streams give a page of 100 quickly", "[server][status]") {
  ServerOptions options;
  konn::core::metrics::Registry registry;
  ServerMetrics metrics(registry);
  asio::io_context timers;
  Router router(options, timers, metrics);
  konn::core::admin::CertificateGauges certificates(registry);
  // Streams never served (no call behind them): what the page reads of each is the same.
  std::vector<std::shared_ptr<Backend>> streams;
  for (int i = 0; i < 20000; ++i) {
    streams.push_back(std::make_shared<Backend>(router));
    router.backends().add(streams.back());
  }
  ServerStatus status(router, options, certificates, [] { return false; });
  auto started = std::chrono::steady_clock::now();
  auto page = status.build("agents_offset=19950");
  auto took = std::chrono::steady_clock::now() - started;
  auto ms = std::chrono::duration<double, std::milli>(took).count();
  WARN("status.json with 20000 agent streams built in " << ms << " ms");
  CHECK(page["agents"]["total"] == 20000);
  CHECK(page["agents"]["items"].size() == 50);  // the last page
  CHECK(page["summary"]["agent_streams"] == 20000);
  CHECK(page["tunnels"]["total"] == 0);
  // Generous (sanitizer builds are several times slower): the point is no per-agent blow-up.
  CHECK(ms < 2000);
  for (auto& s : streams) router.backends().remove(s.get());
}
