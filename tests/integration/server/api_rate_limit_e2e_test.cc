// --kubeconfig-qps / --kubeconfig-burst: the proxy-server's calls to the apiserver (TokenReviews,
// Leases) pass a client-side token bucket, so a storm of reconnecting agents cannot flood the
// apiserver; the default (client-go's 5/s, burst 10) does not slow a normal start.
#include <fstream>
#include <thread>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "core/kube/kubeconfig.h"
#include "core/kube/lease.h"
#include "core/kube/rate_limiter.h"
#include "tests/integration/tunnel/tunnel_stack.h"
#include "tests/support/fake_apiserver.h"

using namespace std::chrono_literals;
using konn::e2e::FakeApiserver;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kAccount = "system:serviceaccount:kube-system:konnectivity-agent";

std::string write_token_file(const konn::testsupport::TempDir& dir, const std::string& name,
                             const std::string& content) {
  std::string path = dir.path() + "/" + name;
  std::ofstream(path) << content;
  return path;
}

// Whether the calls at `times` kept to a token bucket of `burst` refilled at `qps`: every run of
// calls i..j fits in burst + qps * (t_j - t_i), give or take `slack` of timing noise (a call is
// stamped when the apiserver reads it, a TLS handshake after the client took its token).
bool within_bucket(const std::vector<Clock::time_point>& times, double qps, int burst,
                   std::chrono::duration<double> slack) {
  for (size_t i = 0; i < times.size(); ++i) {
    for (size_t j = i; j < times.size(); ++j) {
      double span = std::chrono::duration<double>(times[j] - times[i] + slack).count();
      if (static_cast<double>(j - i + 1) > burst + qps * span) {
        UNSCOPED_INFO("calls " << i << ".." << j << " came within " << span << " s");
        return false;
      }
    }
  }
  return true;
}

struct AuthFixture {
  const konn::testsupport::TestCerts& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-ratelimit"};
  FakeApiserver api{certs.server_crt, certs.server_key, "server-credential"};

  std::unique_ptr<konn::e2e::ServerProcess> start_server(std::vector<std::string> extra) {
    api.set_token("agent-token", {FakeApiserver::Answer::Authenticated, kAccount});
    konn::e2e::ServerSpec spec;
    spec.agent_mtls = false;
    spec.extra_args = {"--agent-namespace=kube-system",
                       "--agent-service-account=konnectivity-agent",
                       "--authentication-audience=system:konnectivity-server",
                       "--kubeconfig=" + api.write_kubeconfig(dir.path(), certs.ca_crt)};
    for (auto& e : extra) spec.extra_args.push_back(std::move(e));
    auto server = std::make_unique<konn::e2e::ServerProcess>(dir, certs, spec);
    server->start();
    return server;
  }

  std::vector<std::unique_ptr<konn::testsupport::Process>> start_agents(uint16_t port, int n) {
    std::string token = write_token_file(dir, "agent.token", "agent-token");
    std::vector<std::unique_ptr<konn::testsupport::Process>> agents;
    for (int i = 0; i < n; ++i) {
      konn::e2e::AgentSpec a;
      a.id = "storm-" + std::to_string(i);
      a.no_client_cert = true;
      a.extra_args = {"--service-account-token-path=" + token};
      agents.push_back(konn::e2e::start_agent(dir, certs, port, a));
    }
    return agents;
  }
};

}  // namespace

// reliability: proxy-server | 8 agents reconnect at once, --kubeconfig-qps=2 --kubeconfig-burst=2
// reliability+: | an agent whose turn would come after --authentication-timeout is refused
// reliability+: without an apiserver call, and retries | warn "agent ... rejected: token review
// reliability+: failed: client-side rate limit ..." | the apiserver sees at most 2 + 2/s
// reliability+: TokenReviews; every agent is admitted on retry
TEST_CASE("the TokenReviews of an agent storm keep to --kubeconfig-qps and --kubeconfig-burst",
          "[e2e][auth][ratelimit]") {
  AuthFixture f;
  auto server =
      f.start_server({"--kubeconfig-qps=2", "--kubeconfig-burst=2", "--authentication-timeout=1s"});
  auto& log = server->process();
  CHECK(log.wait_for_log("at most 2 requests/s, burst 2", 10s));
  constexpr int kAgents = 8;
  auto agents = f.start_agents(server->agent_port(), kAgents);
  for (int i = 0; i < kAgents; ++i) {
    INFO("agent storm-" << i);
    REQUIRE(server->wait_agent_connected("storm-" + std::to_string(i), 60s));
  }
  // The reviews that did not fit the bucket within 1 s were refused before reaching the apiserver.
  CHECK(
      log.wait_for_log("token review failed: client-side rate limit (2 requests/s, burst 2)", 5s));
  auto times = f.api.call_times(true);
  CHECK(static_cast<int>(times.size()) >= kAgents);
  CHECK(within_bucket(times, 2.0, 2, 250ms));
  // The first kAgents reviews alone took at least (kAgents - burst) / qps.
  REQUIRE(times.size() >= kAgents);
  CHECK(times[kAgents - 1] - times[0] >= 2500ms);
}

// reliability: proxy-server | 8 agents start at once, no rate-limit flags | admitted without
// reliability+: waiting (client-go's burst of 10 covers them) | info "... at most 5 requests/s,
// reliability+: burst 10" | -
TEST_CASE("the default client-side limit does not slow a normal start", "[e2e][auth][ratelimit]") {
  AuthFixture f;
  auto server = f.start_server({});
  auto& log = server->process();
  CHECK(log.wait_for_log("at most 5 requests/s, burst 10", 10s));
  constexpr int kAgents = 8;
  auto agents = f.start_agents(server->agent_port(), kAgents);
  auto t0 = Clock::now();
  for (int i = 0; i < kAgents; ++i) {
    REQUIRE(server->wait_agent_connected("storm-" + std::to_string(i), 30s));
  }
  auto times = f.api.call_times(true);
  REQUIRE(times.size() == kAgents);  // each agent reviewed once: none refused, none retried
  auto text = log.log();
  CHECK(text.find("client-side rate limit") == std::string::npos);
  CHECK(text.find("for client-side rate limit") == std::string::npos);
  INFO("all admitted after " << std::chrono::duration<double>(Clock::now() - t0).count() << " s");
  CHECK(Clock::now() - t0 < 10s);
}

// The lease calls pass their own bucket: six lease reads at once through a 4/s, burst-2 limiter
// reach the apiserver two at a time, then one per 250 ms, each caller waiting on its own timer.
TEST_CASE("lease calls wait for their turn without blocking their io_context",
          "[e2e][lease][ratelimit]") {
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir("konn-ratelimit-lease");
  FakeApiserver api(certs.server_crt, certs.server_key, "lease-caller");
  auto rest =
      konn::core::kube::load_daemon_rest_config(api.write_kubeconfig(dir.path(), certs.ca_crt));
  auto target = konn::core::kube::api_target_from(rest);
  target.limiter = konn::core::kube::make_rate_limiter(4, 2);
  konn::core::kube::LeaseClient client(target, "kube-system", 5s);

  asio::io_context ctx;  // one thread for all six calls and a ticker
  int done = 0, ticks = 0;
  bool ticking = true;
  for (int i = 0; i < 6; ++i) {
    asio::co_spawn(
        ctx,
        [&]() -> konn::core::io::Awaitable<void> {
          auto r = co_await client.get(ctx.get_executor(), "absent");
          CHECK(r.response.status == 404);
          if (++done == 6) ticking = false;
        },
        asio::detached);
  }
  // The thread stays free while the calls wait: a 50 ms ticker keeps running.
  asio::co_spawn(
      ctx,
      [&]() -> konn::core::io::Awaitable<void> {
        asio::steady_timer t(ctx);
        while (ticking) {
          t.expires_after(50ms);
          co_await t.async_wait(konn::core::io::use_nothrow);
          ++ticks;
        }
      },
      asio::detached);
  auto t0 = Clock::now();
  ctx.run();
  auto elapsed = Clock::now() - t0;
  CHECK(done == 6);
  CHECK(elapsed >= 950ms);  // (6 - 2) / 4 per second
  CHECK(ticks >= 15);
  auto times = api.call_times(false);
  REQUIRE(times.size() == 6);
  CHECK(within_bucket(times, 4.0, 2, 200ms));
}
