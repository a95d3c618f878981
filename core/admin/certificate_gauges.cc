#include "core/admin/certificate_gauges.h"

#include "core/tls/certificate_expiry.h"

namespace konn::core::admin {

CertificateGauges::CertificateGauges(metrics::Registry& registry)
    : family_(prometheus::BuildGauge()
                  .Name("konn_certificate_expiry_timestamp_seconds")
                  .Help("konn: when a certificate this daemon serves, presents or trusts expires "
                        "(its notAfter, Unix seconds), by listener and kind")
                  .Register(registry.prometheus())) {}

void CertificateGauges::add(const std::string& listener, const std::string& kind,
                            const std::string& path) {
  if (path.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  Entry e{listener, kind, path, {}, std::nullopt, {}};
  auto& gauge = family_.Add({{"listener", listener}, {"kind", kind}});
  read_locked(e, gauge);
  entries_.emplace_back(std::move(e), &gauge);
}

void CertificateGauges::refresh() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [e, gauge] : entries_) read_locked(e, *gauge);
}

void CertificateGauges::read_locked(Entry& e, prometheus::Gauge& gauge) {
  std::string error;
  auto read = tls::read_certificate_expiry(e.path, &error);
  if (!read) {
    e.error = error;
    return;
  }
  e.error.clear();
  e.subject = read->subject;
  e.not_after = read->not_after;
  gauge.Set(static_cast<double>(std::chrono::system_clock::to_time_t(read->not_after)));
}

std::vector<CertificateGauges::Entry> CertificateGauges::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  out.reserve(entries_.size());
  for (const auto& [e, gauge] : entries_) out.push_back(e);
  return out;
}

}  // namespace konn::core::admin
