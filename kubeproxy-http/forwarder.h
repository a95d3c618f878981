#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <asio/execution_context.hpp>
#include <spdlog/logger.h>

#include "core/io/asio_compat.h"
#include "kubeproxy-http/byte_stream.h"
#include "kubeproxy-http/kubeconfig.h"
#include "kubeproxy-http/kubeproxy_metrics.h"
#include "kubeproxy-http/kubeproxy_options.h"
#include "kubeproxy-http/kubeproxy_status.h"
#include "kubeproxy-http/request_filter.h"
#include "kubeproxy-http/upstream_dialer.h"

namespace konn::kubeproxy {

// The `kubectl proxy` data path. For each downstream connection: read request heads (with a
// deadline and a size limit), strip the API prefix, apply the RequestFilter (403 Forbidden), and
// forward to the apiserver over a pooled keep-alive TLS connection with the kubeconfig's
// credentials. Request and response bodies are streamed through fixed buffers (a watch event is
// written to the client as soon as it is read), so memory per connection is bounded whatever the
// body size. Upgrades (exec, attach, port-forward) go to upgrade.h on a fresh connection.
//
// Threading: serve() runs on the downstream connection's io_context; the idle pool is per
// io_context and touched only from its thread, so it needs no lock. Exec credential plugins run
// on CredentialSource's own thread; a request needing one waits for it as a suspended coroutine.
class Forwarder {
 public:
  // Idle upstream connections kept in all, shared out among the workers' pools (at least one
  // each): what kubectl proxy's transport keeps (client-go's MaxIdleConnsPerHost). Each holds a
  // TLS session and its buffers, about 100 KiB of RSS, until kIdleTimeout (measured: 128 idle
  // upstream connections on 2 workers, as the pool used to keep, 33.6 MiB; 25, 25.9 MiB).
  static constexpr size_t kMaxIdleUpstream = 25;
  // Throws std::runtime_error (bad TLS material or patterns) at startup.
  Forwarder(const KubeproxyOptions& options, const RestConfig& rest,
            const std::vector<asio::execution_context*>& contexts);

  // Serves one downstream connection until it closes. `peer` is for logs and X-Forwarded-For.
  // `live` (may be null): what /status.json shows of this connection.
  core::io::Awaitable<void> serve(ByteStream client, std::string peer,
                                  LiveConnection* live = nullptr);

  struct Stats {
    std::atomic<uint64_t> requests{0};
    std::atomic<uint64_t> upstream_dials{0};
    std::atomic<uint64_t> pool_reuses{0};
  };
  const Stats& stats() const { return stats_; }
  // Counts requests, statuses and response bytes there (may be null). Set before serving.
  void set_metrics(KubeproxyMetrics* m) { metrics_ = m; }
  // Where answers >= 400 are recorded for /status.json (may stay null). Set before serving.
  void set_tracker(ConnectionTracker* t) { tracker_ = t; }

 private:
  struct Idle {
    std::unique_ptr<ByteStream> stream;
    std::chrono::steady_clock::time_point since;
    uint64_t generation;  // of the client certificate it was opened with (UpstreamAuth)
  };
  // What one request needs to go upstream.
  struct UpstreamAuth {
    std::string authorization;                // to add when the caller sent none; "" for none
    std::shared_ptr<asio::ssl::context> tls;  // client TLS; null: the kubeconfig's
    uint64_t generation = 0;  // 0 for the kubeconfig's; +1 for each new exec plugin certificate
    std::string error;        // the credential could not be had (exec plugin failure)
  };
  using IdleList = std::deque<Idle>;
  struct Exchange;

  core::io::Awaitable<bool> handle(Exchange& x);
  core::io::Awaitable<bool> forward(Exchange& x, const std::string& target);
  core::io::Awaitable<bool> upgrade(Exchange& x, const std::string& target);
  // `path`: decoded, relative to --www.
  core::io::Awaitable<bool> serve_static(Exchange& x, const std::string& path);
  // 301 Moved Permanently to `location`, as Go's ServeMux answers an unclean path.
  core::io::Awaitable<bool> redirect(Exchange& x, const std::string& location, bool can_keep);

  // Waits (without blocking the thread) for a running exec plugin when the credential needs one.
  // `caller_authorized`: the request carries its own Authorization, which is passed on: then no
  // plugin run is waited for, only the client certificate of its last output is used.
  core::io::Awaitable<UpstreamAuth> upstream_auth(bool caller_authorized);
  UpstreamAuth with_tls(CredentialSource::Credential c);
  // The caller's own Authorization and Impersonate-* headers are removed
  // (--strip-client-credentials, or --require-token, whose token is ours, not the apiserver's).
  bool drops_caller_credentials() const;
  bool caller_authorized(const Exchange& x) const;

  std::unique_ptr<ByteStream> take_idle(asio::any_io_executor ex, uint64_t generation);
  void put_idle(std::unique_ptr<ByteStream> s, uint64_t generation);
  IdleList& idle_for(asio::any_io_executor ex);

  // The upstream request head: Host rewritten, hop-by-hop dropped, credentials added.
  std::string upstream_head(const Exchange& x, const std::string& target, bool is_upgrade,
                            const std::string& authorization);

  const KubeproxyOptions& options_;
  const RestConfig& rest_;
  const std::string apiserver_ = apiserver_address(rest_);  // for /status.json
  CredentialSource credentials_;
  RequestFilter filter_;
  UpstreamDialer dialer_;
  std::map<asio::execution_context*, IdleList> idle_;
  size_t max_idle_per_worker_ = 1;  // kMaxIdleUpstream / workers
  // The client context for the exec plugin's current certificate, shared by the workers.
  std::mutex exec_tls_mu_;
  std::string exec_cert_pem_;
  std::string exec_key_pem_;
  std::shared_ptr<asio::ssl::context> exec_tls_;
  uint64_t exec_generation_ = 0;
  std::shared_ptr<spdlog::logger> log_;
  Stats stats_;
  KubeproxyMetrics* metrics_ = nullptr;
  ConnectionTracker* tracker_ = nullptr;
};

}  // namespace konn::kubeproxy
