#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <asio/ssl/context.hpp>

#include "core/io/asio_compat.h"
#include "kubeproxy-http/byte_stream.h"
#include "kubeproxy-http/kubeconfig.h"

namespace konn::kubeproxy {

// Opens connections to the apiserver as the kubeconfig says: directly or through its proxy-url
// (http or https CONNECT, or socks5), then TLS with verification against the kubeconfig CA and
// SNI/name check on tls-server-name (or the server host). Through an https proxy the apiserver's
// TLS session runs inside the proxy's (TLS in TLS, as Go's http.Transport does). Used for pooled
// requests and for upgrades alike, so upgrades honour proxy-url too (unlike kubectl,
// kubernetes#120318).
class UpstreamDialer {
 public:
  // Throws std::runtime_error when the TLS material in `rest` cannot be used.
  UpstreamDialer(const RestConfig& rest, std::chrono::milliseconds timeout,
                 std::chrono::seconds keepalive);

  struct Outcome {
    std::unique_ptr<ByteStream> stream;  // null on failure
    std::string error;  // Go-style reason, e.g. "dial tcp 127.0.0.1:1: connect: connection refused"
    bool timeout = false;
  };
  // `tls`: the client context to use instead of the kubeconfig's (one carrying the client
  // certificate an exec plugin returned); null for the kubeconfig's.
  core::io::Awaitable<Outcome> dial(asio::any_io_executor ex,
                                    std::shared_ptr<asio::ssl::context> tls = nullptr) const;

  // A client context for the apiserver like the kubeconfig's, with this client certificate and
  // key (PEM). Throws std::runtime_error when they cannot be used.
  std::shared_ptr<asio::ssl::context> context_with_client_cert(const std::string& cert_pem,
                                                               const std::string& key_pem) const;

  // Dials `address` ("host:port") directly with the given timeout (CONNECT mode).
  static core::io::Awaitable<Outcome> dial_plain(asio::any_io_executor ex, std::string address,
                                                 std::chrono::milliseconds timeout);

 private:
  core::io::Awaitable<Outcome> through_proxy(asio::any_io_executor ex) const;

  const RestConfig& rest_;
  std::chrono::milliseconds timeout_;
  std::chrono::seconds keepalive_;
  std::shared_ptr<asio::ssl::context> tls_;        // to the apiserver
  std::shared_ptr<asio::ssl::context> proxy_tls_;  // to an https proxy-url
};

}  // namespace konn::kubeproxy
