// LeaseCounter against FakeApiserver over real TLS sockets: a lease appearing, renewed, deleted
// or expiring changes the count within about a second (the watch, not the poll interval), and a
// watch that breaks, is refused or is too old falls back to lists.
#include "proxy-agent/lease_counter.h"

#include <atomic>
#include <chrono>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/kube/kubeconfig.h"
#include "tests/support/fake_apiserver.h"
#include "tests/support/process_runner.h"
#include "tests/support/prom_text.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

using namespace std::chrono_literals;
using konn::testsupport::eventually;
using nlohmann::json;

namespace {

const std::string kNs = "kube-system";
const std::string kAgent = "konnectivity_network_proxy_agent_";

std::string lease(const std::string& name, std::chrono::system_clock::time_point renewed,
                  int seconds, const std::string& app = "konnectivity-server") {
  json doc = {{"apiVersion", "coordination.k8s.io/v1"},
              {"kind", "Lease"},
              {"metadata", {{"name", name}, {"labels", {{"k8s-app", app}}}}},
              {"spec",
               {{"holderIdentity", name},
                {"leaseDurationSeconds", seconds},
                {"renewTime", konn::core::kube::format_micro_time(renewed)}}}};
  return doc.dump();
}

// A counter on the fake apiserver, with its count and metrics at hand.
struct Counting {
  explicit Counting(konn::testsupport::FakeApiserver& api,
                    std::chrono::seconds watch_timeout = std::chrono::seconds(300),
                    std::chrono::milliseconds poll_interval = 10s)
      : metrics(std::make_shared<konn::agent::AgentStats>()) {
    auto path = api.write_kubeconfig(dir.path(), konn::testsupport::test_certs().ca_crt);
    auto rest = konn::core::kube::load_daemon_rest_config(path);
    konn::agent::LeaseCounter::Settings s;
    s.lease_namespace = kNs;
    s.poll_interval = poll_interval;
    s.request_timeout = 5s;
    s.watch_timeout = watch_timeout;
    counter = std::make_unique<konn::agent::LeaseCounter>(
        konn::core::kube::api_target_from(rest), s, metrics, [this](int64_t n) { count.store(n); });
    counter->start();
  }
  double metric(const std::string& name, const std::map<std::string, std::string>& labels) {
    return konn::testsupport::parse_prometheus_text(metrics.serialize())
        .value(kAgent + name, labels)
        .value_or(0);
  }
  // How long until the count reads `n` (at most `limit`; a failed wait returns more).
  std::chrono::milliseconds time_to(int64_t n, std::chrono::milliseconds limit = 5s) {
    auto start = std::chrono::steady_clock::now();
    eventually([&] { return count.load() == n; }, limit);
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
  }

  konn::testsupport::TempDir dir{"konn-lease"};
  konn::agent::AgentMetrics metrics;
  std::atomic<int64_t> count{-1};
  std::unique_ptr<konn::agent::LeaseCounter> counter;
};

}  // namespace

TEST_CASE("lease counter: a new, deleted or expiring lease changes the count within a second",
          "[agent][lease]") {
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::FakeApiserver api(certs.server_crt, certs.server_key, "agent-token");
  auto now = std::chrono::system_clock::now();
  api.put_lease(kNs, lease("s1", now, 3600));
  api.put_lease(kNs, lease("other", now, 3600, "something-else"));  // not selected
  Counting c(api);
  REQUIRE(c.time_to(1) < 5s);
  REQUIRE(eventually([&] { return api.open_watches() == 1; }, 5s));
  CHECK(api.lease_calls("list") == 1);
  CHECK(api.lease_calls("list-from-cache") == 1);

  // A second server: seen through the watch, well before the 10 s poll interval.
  api.put_lease(kNs, lease("s2", std::chrono::system_clock::now(), 3600));
  auto seen = c.time_to(2);
  CHECK(c.count == 2);
  CHECK(seen < 1500ms);
  // A lease that is already expired adds nothing; one that expires in 1.5 s counts until then,
  // with no event telling that it expired.
  api.put_lease(kNs, lease("s3", std::chrono::system_clock::now() - 1h, 30));
  api.put_lease(kNs, lease("s4", std::chrono::system_clock::now() - 1500ms, 3));
  CHECK(c.time_to(3) < 1500ms);
  auto expired = c.time_to(2, 5s);
  CHECK(c.count == 2);
  CHECK(expired > 500ms);
  CHECK(expired < 3s);
  // Renewed (MODIFIED) brings it back; deleted takes it away.
  api.put_lease(kNs, lease("s4", std::chrono::system_clock::now(), 30));
  CHECK(c.time_to(3) < 1500ms);
  api.delete_lease(kNs, "s2");
  CHECK(c.time_to(2) < 1500ms);
  CHECK(c.count == 2);

  // All of it on one list and one watch.
  CHECK(api.lease_calls("list") == 1);
  CHECK(api.lease_calls("watch") == 1);
  CHECK(c.metric("lease_lists_total", {{"http_response_code", "200"}, {"reason", ""}}) == 1);
  CHECK(c.metric("lease_watches_total", {{"http_response_code", "200"}, {"reason", ""}}) == 1);
  CHECK(c.metric("lease_list_latency_seconds_count", {{"http_response_code", "200"}}) == 1);

  // stop() ends the open watch at once.
  auto start = std::chrono::steady_clock::now();
  c.counter->stop();
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  CHECK(eventually([&] { return api.open_watches() == 0; }, 5s));
}

TEST_CASE("lease counter: a broken watch lists again, a refused one polls, a stale one relists",
          "[agent][lease]") {
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::FakeApiserver api(certs.server_crt, certs.server_key, "agent-token");
  api.put_lease(kNs, lease("s1", std::chrono::system_clock::now(), 3600));

  SECTION("cut mid-stream: listed again, watched again, changes meanwhile are not lost") {
    Counting c(api);
    REQUIRE(c.time_to(1) < 5s);
    REQUIRE(eventually([&] { return api.open_watches() == 1; }, 5s));
    // The apiserver goes away; a server appears while no watch runs.
    api.lease_outage = true;
    REQUIRE(eventually([&] { return api.open_watches() == 0; }, 5s));
    api.put_lease(kNs, lease("s2", std::chrono::system_clock::now(), 3600));
    REQUIRE(eventually([&] { return api.lease_calls("list") >= 2; }, 5s));
    CHECK(c.count == 1);  // the list failed (503): the last count stays
    CHECK(eventually(
        [&] {
          return c.metric("lease_lists_total",
                          {{"http_response_code", "503"}, {"reason", "ServiceUnavailable"}}) >= 1;
        },
        5s));
    api.lease_outage = false;
    // The next list (backoff: 1 s, 2 s, ...) finds it; a watch runs again.
    CHECK(c.time_to(2, 10s) < 10s);
    CHECK(eventually([&] { return api.open_watches() == 1; }, 5s));
    api.break_watches();  // cut again, the apiserver up: listed again within about a second
    int lists = api.lease_calls("list");
    CHECK(eventually([&] { return api.lease_calls("list") > lists; }, 3s));
    CHECK(eventually([&] { return api.open_watches() == 1; }, 5s));
    api.put_lease(kNs, lease("s3", std::chrono::system_clock::now(), 3600));
    CHECK(c.time_to(3) < 1500ms);
  }

  SECTION("refused (no watch permission): polled at --lease-poll-interval") {
    api.refuse_watches = true;
    Counting c(api, 300s, 1s);
    REQUIRE(c.time_to(1) < 5s);
    REQUIRE(eventually([&] { return api.lease_calls("watch") >= 2; }, 5s));
    // Counted once the refusal's body was read: a moment after the apiserver answered.
    CHECK(eventually(
        [&] {
          return c.metric("lease_watches_total",
                          {{"http_response_code", "403"}, {"reason", "Forbidden"}}) >= 2;
        },
        5s));
    api.put_lease(kNs, lease("s2", std::chrono::system_clock::now(), 3600));
    CHECK(c.time_to(2, 3s) < 3s);  // the next list, a second later
    CHECK(api.open_watches() == 0);
  }

  SECTION("ended by the apiserver: watched again from the last version; too old: listed again") {
    Counting c(api, 1s);  // the fake ends each watch after 1-2 s
    REQUIRE(c.time_to(1) < 5s);
    REQUIRE(eventually([&] { return api.lease_calls("watch") >= 3; }, 10s));
    CHECK(api.lease_calls("list") == 1);  // a clean end needs no list
    api.put_lease(kNs, lease("s2", std::chrono::system_clock::now(), 3600));
    CHECK(c.time_to(2) < 1500ms);
    // The next watch is told its version is too old (410): listed again at once.
    api.expire_watches = 1;
    REQUIRE(eventually([&] { return api.lease_calls("list") == 2; }, 5s));
    CHECK(eventually(
        [&] {
          return c.metric("lease_lists_total", {{"http_response_code", "200"}, {"reason", ""}}) ==
                 2;
        },
        5s));
    CHECK(eventually([&] { return api.open_watches() == 1; }, 5s));
    api.put_lease(kNs, lease("s3", std::chrono::system_clock::now(), 3600));
    CHECK(c.time_to(3) < 1500ms);
    CHECK(eventually([&] { return api.open_watches() == 1; }, 5s));
  }
}
