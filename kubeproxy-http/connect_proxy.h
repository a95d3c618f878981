#pragma once

#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "core/io/asio_compat.h"
#include "kubeproxy-http/byte_stream.h"
#include "kubeproxy-http/kubeproxy_options.h"

namespace konn::kubeproxy {

// `--mode=connect`: an HTTP CONNECT forward proxy for kubectl's HTTPS_PROXY or a kubeconfig
// proxy-url. Per connection: read one request head (deadline, size limit), then
//  - anything but CONNECT                          -> 405
//  - --proxy-user set, Proxy-Authorization missing  -> 407 with Proxy-Authenticate: Basic
//  - host:port outside --allowed-destinations       -> 403
//  - dial refused / failed                          -> 502, dial timeout -> 504
//  - dialled                                        -> "HTTP/1.1 200 Connection established"
// and then bytes are relayed both ways with half-close until both sides closed.
class ConnectProxy {
 public:
  explicit ConnectProxy(const KubeproxyOptions& options);

  core::io::Awaitable<void> serve(ByteStream client, std::string peer);

 private:
  bool allowed(const std::string& destination) const;

  const KubeproxyOptions& options_;
  std::vector<std::regex> allowed_;
  std::string expected_auth_;  // "Basic <base64(user:password)>", "" when not required
  std::shared_ptr<spdlog::logger> log_;
};

}  // namespace konn::kubeproxy
