#include "core/metrics/metrics.h"

#include <chrono>

#include <catch2/catch.hpp>

TEST_CASE("registry serializes families and process metrics as Prometheus text", "[metrics]") {
  konn::core::metrics::Registry r;
  auto& family = prometheus::BuildCounter()
                     .Name("konnectivity_network_proxy_server_dial_failure_count")
                     .Help("dial failures")
                     .Register(r.prometheus());
  family.Add({{"reason", "no_agent"}}).Increment(3);
  auto text = r.serialize();
  CHECK(text.find("# TYPE konnectivity_network_proxy_server_dial_failure_count counter") !=
        std::string::npos);
  CHECK(text.find("konnectivity_network_proxy_server_dial_failure_count{reason=\"no_agent\"} 3") !=
        std::string::npos);
  CHECK(text.find("process_resident_memory_bytes ") != std::string::npos);
  CHECK(text.find("process_open_fds ") != std::string::npos);
}

TEST_CASE("process metrics carry the Go client's types, CPU time is a growing counter",
          "[metrics]") {
  konn::core::metrics::Registry r;
  auto text = r.serialize();
  for (const char* line :
       {"# TYPE process_cpu_seconds_total counter", "# TYPE process_start_time_seconds gauge",
        "# TYPE process_resident_memory_bytes gauge", "# TYPE process_virtual_memory_bytes gauge",
        "# TYPE process_open_fds gauge", "# TYPE process_max_fds gauge"}) {
    INFO(line << " in\n" << text);
    CHECK(text.find(line) != std::string::npos);
  }
  auto cpu = [&r] {
    auto t = r.serialize();
    auto at = t.find("\nprocess_cpu_seconds_total ");
    REQUIRE(at != std::string::npos);
    return std::stod(t.substr(at + 27));
  };
  double first = cpu();
  // Burn some CPU so the kernel's tick count moves.
  volatile double sink = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until) sink = sink + 1;
  double second = cpu();
  CHECK(second > first);
}
