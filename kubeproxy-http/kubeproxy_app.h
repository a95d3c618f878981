#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kubeproxy-http/kubeconfig.h"
#include "kubeproxy-http/kubeproxy_options.h"

namespace konn::kubeproxy {

// Wiring of the daemon: kubeconfig (proxy mode), listener (TCP, unix socket, optional TLS),
// WorkerPool, the Forwarder or ConnectProxy, and signal handling.
class KubeproxyApp {
 public:
  // Throws KubeconfigError / std::runtime_error for configuration that cannot be used.
  explicit KubeproxyApp(const KubeproxyOptions& options,
                        const KubeconfigEnvironment& env = KubeconfigEnvironment::from_process());
  ~KubeproxyApp();

  // Binds, prints "Starting to serve on <addr>" to stdout, and serves until SIGINT/SIGTERM.
  // Returns the process exit code.
  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace konn::kubeproxy
