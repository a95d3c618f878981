#include "socks5/socks5_metrics.h"

#include <cstdio>
#include <iterator>
#include <tuple>

namespace konn::socks5 {

Socks5Metrics::Socks5Metrics() {
  auto& r = registry_.prometheus();
  sessions_total_ = &prometheus::BuildCounter()
                         .Name("konn_socks5_sessions_total")
                         .Help("Client connections accepted (sessions opened)")
                         .Register(r)
                         .Add({});
  sessions_active_ = &prometheus::BuildGauge()
                          .Name("konn_socks5_sessions_active")
                          .Help("Sessions open now")
                          .Register(r)
                          .Add({});
  requests_ = &prometheus::BuildCounter()
                   .Name("konn_socks5_requests_total")
                   .Help("SOCKS requests received, by command")
                   .Register(r);
  replies_ = &prometheus::BuildCounter()
                  .Name("konn_socks5_replies_total")
                  .Help("SOCKS replies sent, by REP code (two hex digits)")
                  .Register(r);
  auto& bytes = prometheus::BuildCounter()
                    .Name("konn_socks5_bytes_total")
                    .Help("Bytes relayed, by direction (up: client to destination)")
                    .Register(r);
  bytes_up_ = &bytes.Add({{"direction", "up"}});
  bytes_down_ = &bytes.Add({{"direction", "down"}});
  dial_failures_ = &prometheus::BuildCounter()
                        .Name("konn_socks5_dial_failures_total")
                        .Help("CONNECT destinations not reached, by upstream and reason")
                        .Register(r);
  sessions_refused_ = &prometheus::BuildCounter()
                           .Name("konn_socks5_sessions_refused_total")
                           .Help("Client connections closed unanswered at a session limit")
                           .Register(r);
  auto& udp = prometheus::BuildCounter()
                  .Name("konn_socks5_udp_dropped_total")
                  .Help("UDP datagrams from clients not forwarded, by reason")
                  .Register(r);
  const char* udp_reasons[] = {"foreign_source", "malformed", "fragment",
                               "resolve",        "denied",    "no_socket"};
  static_assert(std::size(udp_reasons) == std::tuple_size_v<decltype(udp_dropped_)>);
  for (size_t i = 0; i < udp_dropped_.size(); ++i) {
    udp_dropped_[i] = &udp.Add({{"reason", udp_reasons[i]}});
  }
  splice_fallbacks_ = &prometheus::BuildCounter()
                           .Name("konn_socks5_splice_fallbacks_total")
                           .Help("Relay directions moved from splice(2) to the buffered copy")
                           .Register(r)
                           .Add({});
}

void Socks5Metrics::session_opened() {
  sessions_total_->Increment();
  sessions_active_->Increment();
}

void Socks5Metrics::session_closed(uint64_t bytes_up, uint64_t bytes_down) {
  sessions_active_->Decrement();
  bytes_up_->Increment(static_cast<double>(bytes_up));
  bytes_down_->Increment(static_cast<double>(bytes_down));
}

void Socks5Metrics::request(const std::string& command) {
  requests_->Add({{"command", command}}).Increment();
}

void Socks5Metrics::reply(uint8_t code) {
  char text[3];
  std::snprintf(text, sizeof text, "%02x", code);
  replies_->Add({{"code", text}}).Increment();
}

void Socks5Metrics::dial_failure(const std::string& upstream, const std::string& reason) {
  dial_failures_->Add({{"upstream", upstream}, {"reason", reason}}).Increment();
}

void Socks5Metrics::session_refused(const std::string& limit) {
  sessions_refused_->Add({{"limit", limit}}).Increment();
}

void Socks5Metrics::udp_dropped(UdpDrop reason) {
  udp_dropped_[static_cast<size_t>(reason)]->Increment();
}

void Socks5Metrics::splice_fallback() { splice_fallbacks_->Increment(); }

}  // namespace konn::socks5
