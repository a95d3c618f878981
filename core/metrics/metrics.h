#pragma once

#include <memory>
#include <mutex>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace konn::core::metrics {

// One Prometheus registry per daemon, exposed as text on /metrics by core/admin. Each component
// declares its metric families in one struct built from this registry (names kept from upstream
// ANP so dashboards keep working). Also exports the process_* metrics of Prometheus' Go client
// with the same types (process_cpu_seconds_total a counter; start time, memory and fds gauges),
// read from /proc at scrape time.
class Registry {
 public:
  Registry();
  prometheus::Registry& prometheus() { return *registry_; }
  std::shared_ptr<prometheus::Registry> shared() { return registry_; }
  // The text exposition format (version 0.0.4) of every family, refreshed process_* included.
  // Thread-safe (the health and admin listeners scrape from their own threads).
  std::string serialize();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Gauge* start_time_;
  prometheus::Gauge* resident_bytes_;
  prometheus::Gauge* virtual_bytes_;
  prometheus::Gauge* open_fds_;
  prometheus::Gauge* max_fds_;
  prometheus::Counter* cpu_seconds_;
  std::mutex mu_;        // serialize() refreshes process_* under it
  double cpu_seen_ = 0;  // what cpu_seconds_ holds; serialize() adds the difference (mu_)
};

}  // namespace konn::core::metrics
