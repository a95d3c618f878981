#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <asio/any_io_executor.hpp>
#include <spdlog/logger.h>

#include "core/kube/api_client.h"

namespace konn::server {

// Admits agents by their projected service-account token: sends an authentication.k8s.io/v1
// TokenReview (with --authentication-audience) to the apiserver and admits the token only when
// the review says authenticated and the user is system:serviceaccount:<namespace>:<account>.
// Reviews run on `ex`, each bounded by `timeout`: a down or slow apiserver rejects agents, never
// stalls the server. The token never appears in a log line or an error text.
class TokenReviewer {
 public:
  struct Verdict {
    bool admitted = false;
    std::string reason;  // why not (safe to log and to send to the agent)
  };

  TokenReviewer(core::kube::ApiTarget target, std::string audience, std::string agent_namespace,
                std::string service_account, asio::any_io_executor ex,
                std::chrono::milliseconds timeout);

  // Calls `done` exactly once, on `ex`.
  void review(std::string token, std::function<void(Verdict)> done);

  // The verdict for an apiserver answer (pure; unit-tested).
  static Verdict judge(int http_status, const std::string& body, const std::string& want_user);

 private:
  core::kube::ApiTarget target_;
  std::string audience_;
  std::string want_user_;
  asio::any_io_executor ex_;
  std::chrono::milliseconds timeout_;
};

}  // namespace konn::server
