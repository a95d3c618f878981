#include "core/profiling/pprof_routes.h"

#include <atomic>
#include <chrono>
#include <future>
#include <sys/prctl.h>
#include <thread>

#include <asio/connect.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/profiling/heap_stats.h"
#include "tests/support/http_get.h"

using konn::core::admin::AdminServer;
using konn::core::admin::Response;
using namespace konn::core::profiling;
using namespace std::chrono_literals;

namespace {

using konn::testsupport::http_get_local;

AdminServer& started(AdminServer& server, bool profiling) {
  server.route("/healthz", [](const std::string&) {
    return Response{200, "text/plain", "ok", {}};
  });
  add_pprof_routes(server, {profiling, false});
  server.start();
  return server;
}

__attribute__((noinline)) void busy_admin_test_loop(const std::atomic<bool>& stop) {
  volatile uint64_t x = 1;
  while (!stop) {
    for (int i = 0; i < 10000; ++i) x = x * 2862933555777941757ULL + 3037000493ULL;
  }
}

}  // namespace

TEST_CASE("profiling off: /debug/pprof paths are 404", "[profiling][admin]") {
  AdminServer server("admin", "127.0.0.1", 0);
  started(server, false);
  for (const char* path : {"/debug/pprof/", "/debug/pprof/profile?seconds=1", "/debug/pprof/heap",
                           "/debug/pprof/block"}) {
    INFO(path);
    CHECK(http_get_local(server.port(), path).status == 404);
  }
}

TEST_CASE("profiling on: a CPU profile over real HTTP, /healthz answering meanwhile",
          "[profiling][admin]") {
  AdminServer server("admin", "127.0.0.1", 0);
  started(server, true);
  auto port = server.port();
  CHECK(http_get_local(port, "/debug/pprof/").body.find("/debug/pprof/profile") !=
        std::string::npos);
  CHECK(http_get_local(port, "/debug/pprof/profile?seconds=0").status == 400);
  CHECK(http_get_local(port, "/debug/pprof/profile?seconds=61").status == 400);
  CHECK(http_get_local(port, "/debug/pprof/profile?seconds=x").status == 400);

  std::atomic<bool> stop{false};
  std::thread worker([&] {
    prctl(PR_SET_NAME, "busy-worker", 0, 0, 0);
    busy_admin_test_loop(stop);
  });
  auto t0 = std::chrono::steady_clock::now();
  auto profile =
      std::async(std::launch::async,
                 [&] { return http_get_local(port, "/debug/pprof/profile?seconds=2"); });
  std::this_thread::sleep_for(300ms);  // let the profile start
  // The admin thread is free while the profile runs: health answers at once, and a second
  // profile is refused rather than queued.
  auto h0 = std::chrono::steady_clock::now();
  CHECK(http_get_local(port, "/healthz").status == 200);
  CHECK(std::chrono::steady_clock::now() - h0 < 500ms);
  auto second = http_get_local(port, "/debug/pprof/profile?seconds=1");
  CHECK(second.status == 409);
  auto r = profile.get();
  stop = true;
  worker.join();
  CHECK(std::chrono::steady_clock::now() - t0 >= 2s);
  REQUIRE(r.status == 200);
  INFO(r.body.substr(0, 2000));
  CHECK(r.body.find("busy-worker;") != std::string::npos);
  CHECK(r.body.find("busy_admin_test_loop") != std::string::npos);
}

TEST_CASE("profiling on: heap statistics parse, contention answers 501", "[profiling][admin]") {
  AdminServer server("admin", "127.0.0.1", 0);
  started(server, true);
  auto heap = http_get_local(server.port(), "/debug/pprof/heap");
  REQUIRE(heap.status == 200);
  auto doc = nlohmann::json::parse(heap.body);
  CHECK(doc["allocator"] == konn::core::profiling::kAllocator);
  for (const char* key : {"heap_bytes", "mmap_bytes", "in_use_bytes", "free_bytes",
                          "releasable_bytes", "rss_bytes"}) {
    INFO(key);
    CHECK(doc[key].is_number_unsigned());
  }
  CHECK(doc["in_use_bytes"].get<uint64_t>() > 0);
  CHECK(doc["rss_bytes"].get<uint64_t>() > 0);
  auto xml = http_get_local(server.port(), "/debug/pprof/heap?format=xml");
  CHECK(xml.body.find("<malloc version=") != std::string::npos);
  auto block = http_get_local(server.port(), "/debug/pprof/block");
  CHECK(block.status == 501);
  CHECK(block.body.find("no lock-contention profile") != std::string::npos);
  CHECK(http_get_local(server.port(), "/debug/pprof/mutex").status == 501);
}
