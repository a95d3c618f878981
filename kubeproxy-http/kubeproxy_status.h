#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/admin/certificate_gauges.h"
#include "core/log/recent_events.h"
#include "kubeproxy-http/kubeproxy_options.h"

namespace konn::kubeproxy {

// The apiserver as scheme://host:port/path (no user info, whatever the kubeconfig's URL holds).
std::string apiserver_address(const RestConfig& rest);

// What /status.json shows of one downstream connection. The serving coroutine writes it (the
// request fields under `mu`, a few times per connection; the byte counts as relaxed atomics, live
// for CONNECT tunnels and per finished request in proxy mode); the health thread reads it.
struct LiveConnection {
  std::string peer;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::atomic<uint64_t> bytes_up{0};    // client → destination / apiserver
  std::atomic<uint64_t> bytes_down{0};  // destination / apiserver → client
  std::atomic<uint64_t> requests{0};
  mutable std::mutex mu;
  std::string request;      // "CONNECT host:port" or "GET /path" (no query string)
  std::string destination;  // host:port, or the apiserver
  std::string via;          // "direct", "konnectivity" or "apiserver"
  void set(std::string req, std::string dest, std::string through) {
    std::lock_guard lock(mu);
    request = std::move(req);
    destination = std::move(dest);
    via = std::move(through);
  }
};

// A request answered with an error status (>= 400) or a CONNECT that could not be made.
struct ConnectionFailure {
  std::chrono::system_clock::time_point at;
  std::string peer;
  std::string request;
  std::string destination;
  int status = 0;
  std::string reason;
};

// Every open downstream connection and the last failures. Thread-safe (a mutex each, held for a
// map insert or erase, or a copy of pointers).
class ConnectionTracker {
 public:
  static constexpr size_t kFailuresKept = 50;
  // Registers a connection; it stays listed until the returned pointer is released.
  std::shared_ptr<LiveConnection> open(std::string peer);
  void record_failure(ConnectionFailure f) { failures_.record(std::move(f)); }
  std::vector<std::shared_ptr<const LiveConnection>> snapshot() const;
  const core::log::RecentEvents<ConnectionFailure>& failures() const { return failures_; }

 private:
  void close(const LiveConnection* c);
  mutable std::mutex mu_;
  std::unordered_map<const LiveConnection*, std::weak_ptr<LiveConnection>> open_;
  core::log::RecentEvents<ConnectionFailure> failures_{kFailuresKept};
};

// kubeproxy-http's /status.json and /status (on the health listener; core/admin/status_page
// serves them): the open connections (count; the longest-lived and the busiest, `?connections=N`,
// 20 by default, at most 200), the last failures, the certificates and the settings without
// secrets (no token, no --proxy-user password, no --require-token, kubeconfig paths only).
// Built on the health thread from the tracker's copies.
class KubeproxyStatus {
 public:
  KubeproxyStatus(const KubeproxyOptions& options, const ConnectionTracker& tracker,
                  const core::admin::CertificateGauges& certificates, std::string apiserver)
      : options_(options),
        tracker_(tracker),
        certificates_(certificates),
        apiserver_(std::move(apiserver)) {}
  nlohmann::ordered_json build(const std::string& query) const;

 private:
  const KubeproxyOptions& options_;
  const ConnectionTracker& tracker_;
  const core::admin::CertificateGauges& certificates_;
  std::string apiserver_;  // proxy mode: the kubeconfig's server URL
  const std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();
};

}  // namespace konn::kubeproxy
