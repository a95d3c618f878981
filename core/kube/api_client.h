#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <asio/any_io_executor.hpp>
#include <asio/ssl/context.hpp>

#include "core/io/asio_compat.h"
#include "core/kube/rate_limiter.h"

namespace konn::core::kube {

// Where and how to reach an apiserver (from a kubeconfig or the in-cluster service account).
struct ApiTarget {
  std::string host;             // without brackets
  uint16_t port = 443;
  std::string path_prefix;      // server URL path, "" when none
  std::string server_name;      // SNI and verification name (default: host)
  std::shared_ptr<asio::ssl::context> tls;  // trust, client certificate, verification
  bool verify = true;           // check the certificate's name (false: insecure-skip-tls-verify)
  // The Authorization header value for each request ("Bearer ...", "Basic ...", "" for none);
  // asked anew every time so rotating token files and exec plugins stay current.
  std::function<std::string()> authorization;
  // The client-side rate limit every request through this target waits for (shared by the
  // copies of the target); nullptr: none.
  std::shared_ptr<RateLimiter> limiter;
};

struct ApiResponse {
  int status = 0;      // HTTP status; 0 when no response arrived
  std::string body;
  std::string error;   // transport failure or timeout, "" when a response arrived
};

struct RestConfig;

// konn's apiserver calls send and accept JSON only ("application/json"). Upstream's
// --kube-api-content-type (default "application/vnd.kubernetes.protobuf") asks client-go for
// protobuf; konn keeps JSON: its calls are few and small (a TokenReview per agent connection, a
// Lease renewal every 15 s, a Lease list every few seconds), every built-in type is served as
// JSON, and protobuf would need Kubernetes' generated schemas for a gain nobody could measure.
// Returns the start-up warning for `content_type` when the daemon calls the apiserver
// (`calls_apiserver`) and asked for anything but JSON; "" otherwise.
std::string content_type_warning(const std::string& content_type, bool calls_apiserver);

// The target described by a loaded kubeconfig (server URL, CA, client certificate, token, token
// file, exec plugin, basic auth). Throws std::runtime_error naming what cannot be used.
ApiTarget api_target_from(const RestConfig& config);

// Waits for a token of `target.limiter` on a timer of `ex` (so it delays only this call), and
// takes the wait off `budget`. Returns "" once the call may go, or the reason it must not: the
// token would come later than `budget`. Without a limiter it returns "" at once. `what` names the
// call in the log line of a long wait. api_request and api_watch both start with it.
io::Awaitable<std::string> wait_for_rate_limit(asio::any_io_executor ex, const ApiTarget& target,
                                               const std::string& what,
                                               std::chrono::milliseconds& budget);

// One HTTPS request on a fresh connection, bounded in total by `timeout` (the wait for a token of
// `target.limiter`, connect, TLS, request, response). Bodies are JSON. Never throws; failures come
// back in `error`. A request whose token would come later than `timeout` fails at once, without
// reaching the apiserver. The wait for a token is a timer on `ex`: it delays only this request.
// Meant for rare control calls (TokenReview, Leases), not for the data plane.
io::Awaitable<ApiResponse> api_request(asio::any_io_executor ex, const ApiTarget& target,
                                       const std::string& method, const std::string& path,
                                       const std::string& body,
                                       std::chrono::milliseconds timeout);

}  // namespace konn::core::kube
