#pragma once

#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "core/io/asio_compat.h"
#include "core/konnectivity/dialer.h"
#include "kubeproxy-http/byte_stream.h"
#include "kubeproxy-http/kubeproxy_metrics.h"
#include "kubeproxy-http/kubeproxy_options.h"
#include "kubeproxy-http/kubeproxy_status.h"

namespace konn::kubeproxy {

// `--mode=connect`: an HTTP CONNECT forward proxy for kubectl's HTTPS_PROXY or a kubeconfig
// proxy-url. Per connection: read one request head (deadline, size limit), then
//  - anything but CONNECT                          -> 405
//  - --proxy-user set, Proxy-Authorization missing  -> 407 with Proxy-Authenticate: Basic
//  - host:port outside --allowed-destinations       -> 403
//  - dial refused / failed                          -> 502, dial timeout -> 504
//  - through Konnectivity: no agent                 -> 503 (proxy-server's 502/503/504 kept)
//  - dialled                                        -> "HTTP/1.1 200 Connection established"
// and then bytes are relayed both ways with half-close until both sides closed, or until nothing
// moved for --half-close-timeout once one side had finished. With `konnectivity` set,
// destinations are dialled through that proxy-server (names unresolved).
class ConnectProxy {
 public:
  // `konnectivity` and `metrics` may be null; both outlive the proxy.
  ConnectProxy(const KubeproxyOptions& options, core::konnectivity::Dialer* konnectivity = nullptr,
               KubeproxyMetrics* metrics = nullptr);

  // `live` (may be null): what /status.json shows of this connection.
  core::io::Awaitable<void> serve(ByteStream client, std::string peer,
                                  LiveConnection* live = nullptr);
  // Where refused and failed CONNECTs are recorded for /status.json (may stay null).
  void set_tracker(ConnectionTracker* tracker) { tracker_ = tracker; }

 private:
  bool allowed(const std::string& destination) const;

  const KubeproxyOptions& options_;
  core::konnectivity::Dialer* konnectivity_;
  KubeproxyMetrics* metrics_;
  ConnectionTracker* tracker_ = nullptr;
  std::vector<std::regex> allowed_;
  std::string expected_auth_;  // "Basic <base64(user:password)>", "" when not required
  std::shared_ptr<spdlog::logger> log_;
};

}  // namespace konn::kubeproxy
