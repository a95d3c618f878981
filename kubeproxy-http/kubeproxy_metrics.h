#pragma once

#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>

#include "core/metrics/metrics.h"

namespace konn::kubeproxy {

// The daemon's Prometheus metrics (served on /metrics by the health listener). Thread-safe.
//   konn_kubeproxy_connections_total, konn_kubeproxy_connections_active   downstream connections
//   konn_kubeproxy_requests_total{mode}        proxy: HTTP requests; connect: CONNECT requests
//   konn_kubeproxy_responses_total{code}       status answered (proxy: also the apiserver's)
//   konn_kubeproxy_bytes_total{direction}      connect: tunnel bytes up (client → destination)
//                                              and down; proxy: response bytes (down)
//   konn_kubeproxy_dial_failures_total{upstream,reason}   connect: direct | konnectivity;
//       reason refused, timeout, no_agent, ... (as core/konnectivity's DialFailure), other
class KubeproxyMetrics {
 public:
  KubeproxyMetrics();
  core::metrics::Registry& registry() { return registry_; }

  void connection_opened();
  void connection_closed();
  void request(const std::string& mode);
  void response(int status);
  void bytes(uint64_t up, uint64_t down);
  void dial_failure(const std::string& upstream, const std::string& reason);

 private:
  core::metrics::Registry registry_;
  prometheus::Counter* connections_total_;
  prometheus::Gauge* connections_active_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* responses_;
  prometheus::Counter* bytes_up_;
  prometheus::Counter* bytes_down_;
  prometheus::Family<prometheus::Counter>* dial_failures_;
};

}  // namespace konn::kubeproxy
