#include "kubeproxy-http/kubeproxy_metrics.h"

namespace konn::kubeproxy {

KubeproxyMetrics::KubeproxyMetrics() {
  auto& r = registry_.prometheus();
  connections_total_ = &prometheus::BuildCounter()
                            .Name("konn_kubeproxy_connections_total")
                            .Help("Downstream connections accepted")
                            .Register(r)
                            .Add({});
  connections_active_ = &prometheus::BuildGauge()
                             .Name("konn_kubeproxy_connections_active")
                             .Help("Downstream connections open now")
                             .Register(r)
                             .Add({});
  requests_ = &prometheus::BuildCounter()
                   .Name("konn_kubeproxy_requests_total")
                   .Help("Requests received, by mode (proxy or connect)")
                   .Register(r);
  responses_ = &prometheus::BuildCounter()
                    .Name("konn_kubeproxy_responses_total")
                    .Help("Responses sent, by HTTP status code")
                    .Register(r);
  auto& bytes = prometheus::BuildCounter()
                    .Name("konn_kubeproxy_bytes_total")
                    .Help("Bytes relayed, by direction (up: client to destination)")
                    .Register(r);
  bytes_up_ = &bytes.Add({{"direction", "up"}});
  bytes_down_ = &bytes.Add({{"direction", "down"}});
  dial_failures_ = &prometheus::BuildCounter()
                        .Name("konn_kubeproxy_dial_failures_total")
                        .Help("CONNECT destinations not reached, by upstream and reason")
                        .Register(r);
}

void KubeproxyMetrics::connection_opened() {
  connections_total_->Increment();
  connections_active_->Increment();
}

void KubeproxyMetrics::connection_closed() { connections_active_->Decrement(); }

void KubeproxyMetrics::request(const std::string& mode) {
  requests_->Add({{"mode", mode}}).Increment();
}

void KubeproxyMetrics::response(int status) {
  responses_->Add({{"code", std::to_string(status)}}).Increment();
}

void KubeproxyMetrics::bytes(uint64_t up, uint64_t down) {
  bytes_up_->Increment(static_cast<double>(up));
  bytes_down_->Increment(static_cast<double>(down));
}

void KubeproxyMetrics::dial_failure(const std::string& upstream, const std::string& reason) {
  dial_failures_->Add({{"upstream", upstream}, {"reason", reason}}).Increment();
}

}  // namespace konn::kubeproxy
