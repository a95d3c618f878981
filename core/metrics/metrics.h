#pragma once

#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace konn::core::metrics {

// One Prometheus registry per daemon, exposed as text on /metrics by core/admin. Each component
// declares its metric families in one struct built from this registry (names kept from upstream
// ANP so dashboards keep working). Also exports process_* basics (start time, RSS, open fds, CPU)
// read from /proc at scrape time.
class Registry {
 public:
  Registry();
  prometheus::Registry& prometheus() { return *registry_; }
  std::shared_ptr<prometheus::Registry> shared() { return registry_; }
  // The text exposition format (version 0.0.4) of every family, refreshed process_* included.
  std::string serialize();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Gauge* start_time_;
  prometheus::Gauge* resident_bytes_;
  prometheus::Gauge* open_fds_;
  prometheus::Gauge* cpu_seconds_;
};

}  // namespace konn::core::metrics
