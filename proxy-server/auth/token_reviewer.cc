#include "proxy-server/auth/token_reviewer.h"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <nlohmann/json.hpp>

namespace konn::server {

TokenReviewer::TokenReviewer(core::kube::ApiTarget target, std::string audience,
                             std::string agent_namespace, std::string service_account,
                             asio::any_io_executor ex, std::chrono::milliseconds timeout)
    : target_(std::move(target)),
      audience_(std::move(audience)),
      want_user_("system:serviceaccount:" + agent_namespace + ":" + service_account),
      ex_(std::move(ex)),
      timeout_(timeout) {}

TokenReviewer::Verdict TokenReviewer::judge(int http_status, const std::string& body,
                                            const std::string& want_user) {
  if (http_status != 200 && http_status != 201) {
    return {false, "token review failed: apiserver answered HTTP " + std::to_string(http_status)};
  }
  auto doc = nlohmann::json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return {false, "token review failed: apiserver answer is not JSON"};
  }
  const auto& status = doc.value("status", nlohmann::json::object());
  if (!status.is_object() || !status.value("authenticated", false)) {
    std::string why = status.is_object() ? status.value("error", std::string()) : std::string();
    return {false, "token not authenticated" + (why.empty() ? std::string() : ": " + why)};
  }
  std::string user;
  if (status.contains("user") && status["user"].is_object()) {
    user = status["user"].value("username", std::string());
  }
  if (user != want_user) {
    return {false, "token belongs to \"" + user + "\", want \"" + want_user + "\""};
  }
  return {true, {}};
}

void TokenReviewer::review(std::string token, std::function<void(Verdict)> done) {
  nlohmann::json request = {{"apiVersion", "authentication.k8s.io/v1"},
                            {"kind", "TokenReview"},
                            {"spec", {{"token", std::move(token)}, {"audiences", {audience_}}}}};
  asio::co_spawn(
      ex_,
      [this, body = request.dump(), done = std::move(done)]() -> core::io::Awaitable<void> {
        auto rsp = co_await core::kube::api_request(
            ex_, target_, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body, timeout_);
        if (!rsp.error.empty()) {
          done({false, "token review failed: " + rsp.error});
        } else {
          done(judge(rsp.status, rsp.body, want_user_));
        }
      },
      asio::detached);
}

}  // namespace konn::server
