#pragma once

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <prometheus/family.h>
#include <prometheus/gauge.h>

#include "core/metrics/metrics.h"

namespace konn::core::admin {

// konn_certificate_expiry_timestamp_seconds{listener,kind}: the notAfter (Unix seconds) of every
// certificate a daemon serves or presents, and of the CA bundles it trusts, read from their PEM
// files. A status page lists the same entries. Thread-safe.
class CertificateGauges {
 public:
  explicit CertificateGauges(metrics::Registry& registry);

  // Watches the PEM file at `path` (nothing when empty) as `kind` ("serving", "client", "ca")
  // of `listener` ("agent", "frontend", "server:<host>", ...), and reads it now.
  void add(const std::string& listener, const std::string& kind, const std::string& path);
  // Reads every file again and sets the gauges: call after a reload. A file that cannot be read
  // keeps its last value and records the error.
  void refresh();

  struct Entry {
    std::string listener;
    std::string kind;
    std::string path;
    std::string subject;
    std::optional<std::chrono::system_clock::time_point> not_after;
    std::string error;  // the last read's, empty when it worked
  };
  std::vector<Entry> entries() const;

 private:
  void read_locked(Entry& e, prometheus::Gauge& gauge);
  prometheus::Family<prometheus::Gauge>& family_;
  mutable std::mutex mu_;
  std::vector<std::pair<Entry, prometheus::Gauge*>> entries_;  // under mu_
};

}  // namespace konn::core::admin
