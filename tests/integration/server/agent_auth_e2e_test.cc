// Agent authentication by projected service-account token: the proxy-server asks the apiserver
// (a TLS fixture here) for a TokenReview and admits only the agents' service account.
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>

#include "test-client/tunnel.h"
#include "tests/integration/tunnel/tunnel_stack.h"
#include "tests/support/fake_apiserver.h"

using namespace std::chrono_literals;
using konn::e2e::FakeApiserver;

namespace {

std::string write_file(const konn::testsupport::TempDir& dir, const std::string& name,
                       const std::string& content) {
  std::string path = dir.path() + "/" + name;
  std::ofstream(path) << content;
  return path;
}

}  // namespace

// reliability: proxy-server | agent token of another service account, or not authenticated |
// reliability+: `UNAUTHENTICATED`, not admitted | warn "agent ... from ... rejected: token belongs
// reliability+: to "system:serviceaccount:default:intruder", want ..." or "... token not
// reliability+: authenticated: ..." | the admitted agent serves dials
// reliability: proxy-server | apiserver answers the TokenReview with HTTP 500 | `UNAUTHENTICATED` |
// reliability+: warn "agent error from ... rejected: token review failed: apiserver answered HTTP
// reliability+: 500" | the admitted agent serves dials
// reliability: proxy-server | TokenReview that hangs 15 s | refused after --authentication-timeout
// reliability+: (2 s) | warn "agent slow from ... rejected: token review failed: no answer ..." |
// reliability+: dials through the admitted agent answered within 2 s meanwhile
TEST_CASE("agents are admitted by TokenReview, and only the agents' service account",
          "[e2e][auth]") {
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir("konn-auth");
  FakeApiserver api(certs.server_crt, certs.server_key, "server-credential");
  const std::string sa = "system:serviceaccount:kube-system:konnectivity-agent";
  api.set_token("good-token-1", {FakeApiserver::Answer::Authenticated, sa});
  api.set_token("intruder-token", {FakeApiserver::Answer::Authenticated,
                                   "system:serviceaccount:default:intruder"});
  api.set_token("expired-token", {FakeApiserver::Answer::Unauthenticated, ""});
  api.set_token("error-token", {FakeApiserver::Answer::ServerError, ""});
  api.set_token("slow-token", {FakeApiserver::Answer::Slow, sa});
  api.slow_delay = 15s;

  konn::e2e::ServerSpec spec;
  spec.agent_mtls = false;  // token authentication excludes --cluster-ca-cert, as upstream
  spec.extra_args = {"--agent-namespace=kube-system",
                     "--agent-service-account=konnectivity-agent",
                     "--authentication-audience=system:konnectivity-server",
                     "--kubeconfig=" + api.write_kubeconfig(dir.path(), certs.ca_crt),
                     "--authentication-timeout=2s"};
  konn::e2e::ServerProcess server(dir, certs, spec);
  server.start();

  auto agent = [&](const std::string& id, const std::string& token) {
    konn::e2e::AgentSpec a;
    a.id = id;
    a.no_client_cert = true;
    a.extra_args = {"--service-account-token-path=" + write_file(dir, id + ".token", token)};
    return konn::e2e::start_agent(dir, certs, server.agent_port(), a);
  };
  auto good = agent("good", "good-token-1");
  REQUIRE(server.wait_agent_connected("good", 20s));

  // Slow first: its review hangs at the apiserver while everything else goes on.
  auto slow = agent("slow", "slow-token");
  auto intruder = agent("intruder", "intruder-token");
  auto expired = agent("expired", "expired-token");
  auto error = agent("error", "error-token");
  auto& log = server.process();
  CHECK(log.wait_for_log("agent intruder from", 20s));
  CHECK(log.wait_for_log("token belongs to \"system:serviceaccount:default:intruder\"", 20s));
  CHECK(log.wait_for_log("agent expired from", 20s));
  CHECK(log.wait_for_log("token not authenticated: token is not valid", 20s));
  CHECK(log.wait_for_log("apiserver answered HTTP 500", 20s));

  // While the slow review is outstanding, the admitted agent keeps serving dials.
  konn::testsupport::HttpServer http;
  http.add_page("/p", "served during a slow token review");
  auto channel = server.new_channel();
  auto t0 = std::chrono::steady_clock::now();
  auto dialed = konn::testclient::Tunnel::dial(channel, http.address(), 10s);
  REQUIRE(dialed.tunnel);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  dialed.tunnel->close();
  // The slow review is abandoned after --authentication-timeout and the agent refused.
  CHECK(log.wait_for_log("agent slow from", 10s));
  CHECK(log.wait_for_log("token review failed: no answer", 10s));
  CHECK_FALSE(server.wait_agent_connected("slow", 1s));
  CHECK_FALSE(server.wait_agent_connected("intruder", 1s));

  CHECK(api.unauthorized_callers() == 0);  // the server used its kubeconfig credential
  CHECK(api.reviews() >= 5);
  auto text = log.log();
  for (const char* secret : {"good-token-1", "intruder-token", "expired-token", "server-credential"}) {
    INFO(secret);
    CHECK(text.find(secret) == std::string::npos);  // no token in any log line
  }
}
