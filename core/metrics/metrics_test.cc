#include "core/metrics/metrics.h"

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
