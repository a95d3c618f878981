// HA: several proxy-servers behind one load-balanced address, agents holding a stream to each,
// and lease-based server counting.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/kube/lease.h"
#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/ha/ha_test_util.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/support/echo_server.h"
#include "tests/support/fake_apiserver.h"
#include "tests/support/tcp_balancer.h"

using namespace konn::e2e;
using konn::testsupport::eventually;
using konn::testsupport::FakeApiserver;
using konn::testsupport::TcpBalancer;
using nlohmann::json;

namespace {

std::vector<uint16_t> agent_ports(const std::vector<std::unique_ptr<FleetServer>>& servers) {
  std::vector<uint16_t> ports;
  for (const auto& s : servers) ports.push_back(s->agent_port());
  return ports;
}

}  // namespace

// reliability: proxy-agent | SIGKILL of one of three servers behind one balanced address | its
// reliability+: stream dropped, 2 of 3 kept | info "server ... at ... gone: ..." | both agents
// reliability+: route through the 2 other servers
TEST_CASE(
    "ha: three servers and two agents, a stream to each, and a killed server leaves the rest "
    "routing",
    "[e2e][ha]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-ha"};
  konn::testsupport::EchoServer echo;
  TcpBalancer lb;
  std::vector<std::unique_ptr<FleetServer>> servers;
  for (const char* id : {"s1", "s2", "s3"}) {
    servers.push_back(
        std::make_unique<FleetServer>(certs, id, std::vector<std::string>{"--server-count=3"}));
    servers.back()->start();
  }
  lb.set_backends(agent_ports(servers));
  FleetAgent a1(dir, certs, "a1", lb.port(), {});
  FleetAgent a2(dir, certs, "a2", lb.port(), {});

  // Each agent dials the one balanced address until it holds a stream to three distinct servers.
  REQUIRE(eventually([&] { return a1.servers() == 3 && a2.servers() == 3; }, 30s));
  for (auto& s : servers) {
    INFO("server " << s->id());
    REQUIRE(eventually([&] { return s->ready_agents() == 2; }, 10s));
    echo_tunnel(s->channel(), echo.address())->close();
  }

  servers[1]->kill();
  REQUIRE(eventually([&] { return a1.servers() == 2 && a2.servers() == 2; }, 20s));
  for (size_t i : {size_t{0}, size_t{2}}) {
    INFO("server " << servers[i]->id());
    CHECK(servers[i]->ready_agents() == 2);
    for (int n = 0; n < 4; ++n) echo_tunnel(servers[i]->channel(), echo.address())->close();
  }
}

// reliability: proxy-agent | apiserver down: lease watch cut, lease lists answered 503 | keeps the
// reliability+: last server count (4) | warn "lease watch broke (watch stream cut: ...)", then
// reliability+: "cannot list server leases (...); keeping the last count 4" | streams to the 4
// reliability+: servers; lists retried with a backoff up to --lease-poll-interval
TEST_CASE(
    "ha: servers publish Leases, collect expired ones, and agents counting them find a "
    "fourth server",
    "[e2e][ha][lease]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-ha"};
  konn::testsupport::EchoServer echo;
  FakeApiserver api(certs.server_crt, certs.server_key, "lease-caller");
  std::string kubeconfig = api.write_kubeconfig(dir.path(), certs.ca_crt);
  const std::string ns = "kube-system";

  // A lease of a server that died an hour ago: garbage for the servers to collect.
  auto hour_ago = std::chrono::system_clock::now() - std::chrono::hours(1);
  json stale = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata",
                 {{"name", "konnectivity-proxy-server-gone"},
                  {"labels", {{"k8s-app", "konnectivity-server"}}}}},
                {"spec",
                 {{"holderIdentity", "gone"},
                  {"leaseDurationSeconds", 30},
                  {"renewTime", konn::core::kube::format_micro_time(hour_ago)}}}};
  api.put_lease(ns, stale.dump());
  // Another component's lease in the namespace: not ours to count or collect.
  json foreign = stale;
  foreign["metadata"] = {{"name", "kube-scheduler"}, {"labels", {{"component", "sched"}}}};
  api.put_lease(ns, foreign.dump());

  // --server-count=1: only the leases can tell the agents there are more servers.
  std::vector<std::string> server_args{"--server-count=1", "--enable-lease-controller",
                                       "--kubeconfig=" + kubeconfig, "--lease-renew-interval=1s"};
  // The default --lease-poll-interval (10s): the agents learn of servers through their watch.
  std::vector<std::string> agent_args{"--count-server-leases", "--kubeconfig=" + kubeconfig};
  TcpBalancer lb;
  std::vector<std::unique_ptr<FleetServer>> servers;
  for (const char* id : {"s1", "s2", "s3"}) {
    servers.push_back(std::make_unique<FleetServer>(certs, id, server_args));
    servers.back()->start();
  }
  lb.set_backends(agent_ports(servers));

  auto names = [&] { return api.lease_names(ns); };
  auto has = [&](const std::string& name) {
    auto n = names();
    return std::find(n.begin(), n.end(), name) != n.end();
  };
  REQUIRE(eventually(
      [&] {
        return has("konnectivity-proxy-server-s1") && has("konnectivity-proxy-server-s2") &&
               has("konnectivity-proxy-server-s3") && !has("konnectivity-proxy-server-gone");
      },
      20s));
  CHECK(has("kube-scheduler"));
  auto s1 = json::parse(*api.lease(ns, "konnectivity-proxy-server-s1"));
  CHECK(s1["metadata"]["labels"] == json({{"k8s-app", "konnectivity-server"}}));
  CHECK(s1["spec"]["holderIdentity"] == "s1");
  CHECK(s1["spec"]["leaseDurationSeconds"] == 2);  // twice --lease-renew-interval
  auto renewed = konn::core::kube::parse_rfc3339(s1["spec"]["renewTime"].get<std::string>());
  REQUIRE(renewed);
  CHECK(std::chrono::abs(std::chrono::system_clock::now() - *renewed) < std::chrono::minutes(1));
  // Renewed periodically: the stored version moves on.
  std::string version = s1["metadata"]["resourceVersion"];
  CHECK(eventually(
      [&] {
        auto now = json::parse(*api.lease(ns, "konnectivity-proxy-server-s1"));
        return now["metadata"]["resourceVersion"] != version;
      },
      10s));
  // Exactly one server collected the stale lease (the others found it gone or changed).
  auto total = [&](const std::string& name, const std::map<std::string, std::string>& labels) {
    double sum = 0;
    for (auto& s : servers) sum += s->metric(name, labels).value_or(0);
    return sum;
  };
  CHECK(eventually(
      [&] { return total("konnectivity_network_proxy_server_culled_leases_count", {}) == 1; },
      10s));
  CHECK(total("konnectivity_network_proxy_server_lease_delete_total",
              {{"http_status_code", "200"}, {"reason", ""}}) == 1);
  for (auto& s : servers) {
    CHECK(s->metric("konnectivity_network_proxy_server_lease_list_total",
                    {{"http_status_code", "200"}, {"reason", ""}})
              .value_or(0) >= 1);
  }

  FleetAgent a1(dir, certs, "a1", lb.port(), agent_args);
  FleetAgent a2(dir, certs, "a2", lb.port(), agent_args);
  REQUIRE(eventually([&] { return a1.servers() == 3 && a2.servers() == 3; }, 30s));
  CHECK(a1.metric("konnectivity_network_proxy_agent_known_server_count") == 3);
  CHECK(a1.metric("konnectivity_network_proxy_agent_lease_lists_total",
                  {{"http_response_code", "200"}, {"reason", ""}})
            .value_or(0) >= 1);
  CHECK(api.lease_calls("list-from-cache") >= 2);  // the agents' lists (the servers' GC reads etcd)

  CHECK(api.lease_calls("watch") >= 2);
  CHECK(a1.metric("konnectivity_network_proxy_agent_lease_watches_total",
                  {{"http_response_code", "200"}, {"reason", ""}})
            .value_or(0) >= 1);

  // A fourth server comes up: its Lease is the only news the agents get, through their watch
  // within about a second of its creation (a poll would take up to 10 s).
  servers.push_back(std::make_unique<FleetServer>(certs, "s4", server_args));
  servers.back()->start();
  lb.set_backends(agent_ports(servers));
  REQUIRE(eventually([&] { return has("konnectivity-proxy-server-s4"); }, 20s));
  auto created = std::chrono::steady_clock::now();
  REQUIRE(eventually(
      [&] {
        return a1.metric("konnectivity_network_proxy_agent_known_server_count") == 4 &&
               a2.metric("konnectivity_network_proxy_agent_known_server_count") == 4;
      },
      10s));
  CHECK(std::chrono::steady_clock::now() - created < 2s);
  REQUIRE(eventually([&] { return a1.servers() == 4 && a2.servers() == 4; }, 30s));
  REQUIRE(eventually([&] { return servers[3]->ready_agents() == 2; }, 10s));
  echo_tunnel(servers[3]->channel(), echo.address())->close();

  // An unreachable apiserver (watches cut, lists refused) keeps the last count.
  api.lease_outage = true;
  int lists = api.lease_calls("list");
  REQUIRE(eventually([&] { return api.lease_calls("list") >= lists + 8; }, 20s));
  CHECK(a1.process().wait_for_log("lease watch broke (watch stream cut", 10s));
  CHECK(a1.process().wait_for_log("cannot list server leases", 10s));
  INFO("agent a1:\n" << a1.process().log());
  CHECK(a1.process().running());
  CHECK(a1.metric("konnectivity_network_proxy_agent_known_server_count") == 4);
  CHECK(a1.metric("konnectivity_network_proxy_agent_lease_lists_total",
                  {{"http_response_code", "503"}, {"reason", "ServiceUnavailable"}})
            .value_or(0) >= 1);
  CHECK(a1.servers() == 4);
  api.lease_outage = false;

  // A server shutting down deletes its own lease.
  CHECK(servers[3]->process().terminate(20s) == 0);
  CHECK_FALSE(has("konnectivity-proxy-server-s4"));
  CHECK(api.unauthorized_callers() == 0);
}
