#include "proxy-server/auth/token_reviewer.h"

#include <catch2/catch.hpp>

using konn::server::TokenReviewer;

TEST_CASE("token review verdicts", "[server][auth]") {
  const std::string want = "system:serviceaccount:kube-system:konnectivity-agent";
  auto ok = TokenReviewer::judge(
      201,
      R"({"kind":"TokenReview","status":{"authenticated":true,"user":{"username":")" + want +
          R"("}}})",
      want);
  CHECK(ok.admitted);
  auto wrong = TokenReviewer::judge(
      201, R"({"status":{"authenticated":true,"user":{"username":"system:serviceaccount:default:x"}}})",
      want);
  CHECK_FALSE(wrong.admitted);
  CHECK(wrong.reason.find("system:serviceaccount:default:x") != std::string::npos);
  auto unauth = TokenReviewer::judge(201, R"({"status":{"authenticated":false,"error":"expired"}})", want);
  CHECK_FALSE(unauth.admitted);
  CHECK(unauth.reason == "token not authenticated: expired");
  CHECK_FALSE(TokenReviewer::judge(500, "{}", want).admitted);
  CHECK_FALSE(TokenReviewer::judge(201, "not json", want).admitted);
  CHECK_FALSE(TokenReviewer::judge(201, R"({"status":"weird"})", want).admitted);
}
