// /status.json of socks5 and kubeproxy-http on their health listener (issue 40), with real curl
// through each daemon: the open connection, the failures a refused destination or a wrong
// password leaves, the 403 beyond loopback, and no secret in the body.
#include <csignal>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/status/status_daemons.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/support/echo_server.h"
#include "tests/support/fake_apiserver.h"
#include "tests/support/loopback.h"

using namespace konn::e2e;
using konn::testsupport::eventually;
using nlohmann::json;

namespace {

// The row of `rows` whose `key` starts with `prefix` (null when none).
json row_starting(const json& rows, const std::string& key, const std::string& prefix) {
  for (const auto& r : rows) {
    if (r.value(key, "").rfind(prefix, 0) == 0) return r;
  }
  return nullptr;
}

json daemon_status(uint16_t health) {
  auto r = http_get_local(health, "/status.json");
  REQUIRE(r.status == 200);
  return json::parse(r.body);
}

// curl with `args`, run to completion.
konn::testsupport::RunResult run_curl(std::vector<std::string> args) {
  konn::testsupport::ProcessOptions o;
  o.binary = "curl";
  o.search_path = true;
  o.args = {"-sS", "--max-time", "10", "--noproxy", ""};
  o.args.insert(o.args.end(), args.begin(), args.end());
  return konn::testsupport::run_process(o, 20s);
}

// curl with `args` left running (it holds a connection open until killed).
std::unique_ptr<konn::testsupport::Process> start_curl(std::vector<std::string> args) {
  konn::testsupport::ProcessOptions o;
  o.binary = "curl";
  o.search_path = true;
  o.args = {"-sS", "--max-time", "60", "--noproxy", ""};
  o.args.insert(o.args.end(), args.begin(), args.end());
  return std::make_unique<konn::testsupport::Process>(std::move(o));
}

// The row of `rows` whose `key` is `value` (null when none).
json row_with(const json& rows, const std::string& key, const std::string& value) {
  for (const auto& r : rows) {
    if (r.value(key, "") == value) return r;
  }
  return nullptr;
}

// `daemon` with `args` and its health listener on every address: /status and /status.json answer
// 403 naming --status-page-off-loopback (/metrics still 200), and the page with the flag.
void check_page_needs_off_loopback(const std::string& daemon, std::vector<std::string> args) {
  uint16_t closed = konn::testsupport::free_tcp_port();
  auto with_port = [&args](uint16_t port, bool off_loopback) {
    auto a = args;
    a.push_back("--health-port=" + std::to_string(port));
    if (off_loopback) a.push_back("--status-page-off-loopback");
    return a;
  };
  auto off = start_status_daemon(daemon, with_port(closed, false), closed);
  check_status_page_refused(closed);

  uint16_t open = konn::testsupport::free_tcp_port();
  auto on = start_status_daemon(daemon, with_port(open, true), open);
  CHECK(daemon_status(open)["summary"]["daemon"] == daemon);
}

}  // namespace

TEST_CASE("status: socks5's /status.json shows curl's open session, its failures and no password",
          "[e2e][status]") {
  KONN_REQUIRE_DAEMONS();
  konn::testsupport::TempDir dir{"konn-socks5-status"};
  konn::testsupport::EchoServer echo;
  const std::string password = "open sesame-7781";
  const std::string wrong = "wrong-guess-4411";
  konn::testsupport::ProcessOptions hash;
  hash.binary = "openssl";
  hash.search_path = true;
  hash.args = {"passwd", "-6", "-salt", "konnstatus", password};
  auto hashed = konn::testsupport::run_process(hash, 20s);
  REQUIRE(hashed.exit_code == 0);
  std::string users = dir.path() + "/users";
  {
    std::ofstream f(users);
    f << "alice:" << hashed.output;
  }
  uint16_t port = konn::testsupport::free_tcp_port();
  uint16_t health = konn::testsupport::free_tcp_port();
  auto socks = start_status_daemon(
      "socks5",
      {"--port=" + std::to_string(port), "--bind-address=127.0.0.1", "--users-file=" + users,
       "--health-bind-address=127.0.0.1", "--health-port=" + std::to_string(health)},
      health);
  const std::string proxy = "alice:open%20sesame-7781@127.0.0.1:" + std::to_string(port);

  // An open session: curl --socks5-hostname to the echo server, which echoes the request back
  // and never closes (HTTP/0.9 lets curl take that as a body and keep reading).
  const std::string dest = "localhost:" + std::to_string(echo.port());
  auto held = start_curl({"--http0.9", "-x", "socks5h://" + proxy, "http://" + dest + "/"});
  json s;
  json session;
  REQUIRE(eventually(
      [&] {
        s = daemon_status(health);
        session = row_with(s["sessions"]["busiest"], "destination", dest);
        return !session.is_null() && session["bytes_up"].get<uint64_t>() > 0 &&
               session["bytes_down"].get<uint64_t>() > 0;
      },
      10s));
  INFO(s.dump(1));
  CHECK(s["summary"]["daemon"] == "socks5");
  CHECK(s["sessions"]["open"] == 1);
  CHECK(session["command"] == "CONNECT");
  CHECK(session["via"] == "direct");
  CHECK(session["client"].get<std::string>().rfind("127.0.0.1:", 0) == 0);
  CHECK(session["bytes_up"] == session["bytes_down"]);  // the echo
  CHECK(!row_with(s["sessions"]["longest_lived"], "destination", dest).is_null());
  CHECK(s["limits"][0]["flag"] == "--max-sessions");
  CHECK(s["limits"][0]["used"] == 1);

  // A refused destination (curl --socks5: the address is resolved by curl) and a wrong
  // password leave a failure row each.
  const std::string closed = "127.0.0.1:" + std::to_string(konn::testsupport::free_tcp_port());
  CHECK(run_curl({"--socks5", proxy, "http://" + closed + "/"}).exit_code != 0);
  CHECK(run_curl({"-x", "socks5://alice:" + wrong + "@127.0.0.1:" + std::to_string(port),
                  "http://" + dest + "/"})
            .exit_code != 0);
  json refused;
  json denied;
  REQUIRE(eventually(
      [&] {
        s = daemon_status(health);
        refused = row_with(s["failures"]["recent"], "destination", closed);
        denied = row_with(s["failures"]["recent"], "reason", "authentication failed");
        return !refused.is_null() && !denied.is_null();
      },
      10s));
  CHECK(refused["reply_code"] == "05");
  CHECK(refused["command"] == "CONNECT");
  CHECK(s["failures"]["total"].get<int>() >= 2);

  // No secret: neither password, nor the users file's hash, in the JSON or the page.
  for (const char* path : {"/status.json", "/status"}) {
    auto body = http_get_local(health, path).body;
    CHECK(body.find("sesame") == std::string::npos);
    CHECK(body.find(wrong) == std::string::npos);
    CHECK(body.find("$6$") == std::string::npos);
  }
  held->kill(SIGKILL);
  CHECK(eventually([&] { return daemon_status(health)["sessions"]["open"] == 0; }, 10s));
}

TEST_CASE("status: socks5's page on a health port beyond loopback needs --status-page-off-loopback",
          "[e2e][status]") {
  KONN_REQUIRE_DAEMONS();
  // The default --health-bind-address is every address.
  check_page_needs_off_loopback("socks5", {"--port=0", "--bind-address=127.0.0.1"});
}

TEST_CASE(
    "status: kubeproxy-http's /status.json shows a forwarded watch and a CONNECT tunnel, their "
    "failures and no token or password",
    "[e2e][status]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-kubeproxy-status"};
  konn::testsupport::EchoServer echo;

  // Proxy mode (kubectl proxy): a watch held open through the forwarder, then a path the default
  // --reject-paths refuses (403).
  const std::string token = "kubeconfig-secret-token-5150";
  konn::testsupport::FakeApiserver api(certs.server_crt, certs.server_key, token);
  auto kubeconfig = api.write_kubeconfig(dir.path(), certs.ca_crt);
  uint16_t proxy_port = konn::testsupport::free_tcp_port();
  uint16_t proxy_health = konn::testsupport::free_tcp_port();
  auto proxy =
      start_status_daemon("kubeproxy-http",
                          {"--kubeconfig=" + kubeconfig, "--port=" + std::to_string(proxy_port),
                           "--health-port=" + std::to_string(proxy_health)},
                          proxy_health);
  const std::string base = "http://127.0.0.1:" + std::to_string(proxy_port);
  const std::string watch_path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
  // Bookmarks every second: the forwarder writes, so it sees the client go once curl is killed.
  auto watch = start_curl({"-N", base + watch_path + "?watch=1&allowWatchBookmarks=true"});
  json s;
  json row;
  REQUIRE(eventually(
      [&] {
        s = daemon_status(proxy_health);
        row = row_with(s["connections"]["longest_lived"], "request", "GET " + watch_path);
        return !row.is_null();
      },
      10s));
  INFO(s.dump(1));
  CHECK(s["summary"]["daemon"] == "kubeproxy-http");
  CHECK(s["summary"]["mode"] == "proxy");
  CHECK(s["connections"]["open"] == 1);
  CHECK(row["via"] == "apiserver");
  CHECK(row["destination"] == "https://127.0.0.1:" + std::to_string(api.port()));
  CHECK(row["client"].get<std::string>().rfind("127.0.0.1", 0) == 0);
  const std::string exec_path = "/api/v1/namespaces/default/pods/web/exec";
  CHECK(run_curl({"-o", "/dev/null", base + exec_path + "?command=ls"}).exit_code == 0);
  json rejected;
  REQUIRE(eventually(
      [&] {
        s = daemon_status(proxy_health);
        rejected = row_with(s["failures"]["recent"], "request", "GET " + exec_path);
        return !rejected.is_null();
      },
      10s));
  CHECK(rejected["status"] == 403);
  for (const char* path : {"/status.json", "/status"}) {
    auto body = http_get_local(proxy_health, path).body;
    CHECK(body.find(token) == std::string::npos);
    CHECK(body.find("command=ls") == std::string::npos);  // no query string
  }
  watch->kill(SIGKILL);
  CHECK(eventually([&] { return daemon_status(proxy_health)["connections"]["open"] == 0; }, 10s));

  // Connect mode with --proxy-user: a tunnel to the echo server held open (curl -p: CONNECT
  // even for http://), then a refused destination (502) and a wrong password (407).
  const std::string password = "hunter2-secret-99";
  uint16_t connect_port = konn::testsupport::free_tcp_port();
  uint16_t connect_health = konn::testsupport::free_tcp_port();
  auto connect = start_status_daemon(
      "kubeproxy-http",
      {"--mode=connect", "--port=" + std::to_string(connect_port), "--address=127.0.0.1",
       "--proxy-user=bob:" + password, "--health-bind-address=127.0.0.1",
       "--health-port=" + std::to_string(connect_health)},
      connect_health);
  const std::string via = "http://bob:" + password + "@127.0.0.1:" + std::to_string(connect_port);
  auto tunnel = start_curl({"--http0.9", "-p", "-x", via, "http://" + echo.address() + "/"});
  REQUIRE(eventually(
      [&] {
        s = daemon_status(connect_health);
        row = row_with(s["connections"]["busiest"], "destination", echo.address());
        return !row.is_null() && row["bytes_up"].get<uint64_t>() > 0 &&
               row["bytes_down"].get<uint64_t>() > 0;
      },
      10s));
  CHECK(s["summary"]["mode"] == "connect");
  CHECK(row["request"] == "CONNECT " + echo.address());
  CHECK(row["via"] == "direct");
  CHECK(row["bytes_up"] == row["bytes_down"]);  // the echo
  const std::string closed = "127.0.0.1:" + std::to_string(konn::testsupport::free_tcp_port());
  CHECK(run_curl({"-p", "-x", via, "http://" + closed + "/"}).exit_code != 0);
  CHECK(run_curl({"-p", "-x", "http://bob:wrong@127.0.0.1:" + std::to_string(connect_port),
                  "http://" + echo.address() + "/"})
            .exit_code != 0);
  json refused;
  json unauthorized;
  REQUIRE(eventually(
      [&] {
        s = daemon_status(connect_health);
        refused = row_with(s["failures"]["recent"], "destination", closed);
        unauthorized = row_starting(s["failures"]["recent"], "request", "CONNECT ");
        for (const auto& f : s["failures"]["recent"]) {
          if (f["status"] == 407) unauthorized = f;
        }
        return !refused.is_null() && !unauthorized.is_null() && unauthorized["status"] == 407;
      },
      10s));
  CHECK(refused["status"] == 502);
  CHECK(refused["request"] == "CONNECT " + closed);
  for (const char* path : {"/status.json", "/status"}) {
    auto body = http_get_local(connect_health, path).body;
    CHECK(body.find(password) == std::string::npos);
    CHECK(body.find("Ym9i") == std::string::npos);  // base64 of "bob": no Proxy-Authorization
  }
  tunnel->kill(SIGKILL);
}

TEST_CASE(
    "status: kubeproxy-http's page on a health port beyond loopback needs "
    "--status-page-off-loopback",
    "[e2e][status]") {
  KONN_REQUIRE_DAEMONS();
  // Connect mode's health listener binds every address by default.
  check_page_needs_off_loopback("kubeproxy-http", {"--mode=connect", "--port=0"});
}

TEST_CASE("status: socks5 and kubeproxy-http show a tunnel through Konnectivity as such",
          "[e2e][status]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-upstream-status"};
  konn::testsupport::EchoServer echo;
  FleetServer server{certs, "s1", {}};
  server.start();
  FleetAgent agent(dir, certs, "agent-a", server.agent_port(), {});
  REQUIRE(eventually([&] { return server.ready_agents() == 1; }, 20s));
  const std::string upstream = "--konnectivity-address=unix:" + server.uds_path();

  uint16_t socks_port = konn::testsupport::free_tcp_port();
  uint16_t socks_health = konn::testsupport::free_tcp_port();
  auto socks = start_status_daemon(
      "socks5",
      {"--port=" + std::to_string(socks_port), "--bind-address=127.0.0.1", upstream,
       "--health-bind-address=127.0.0.1", "--health-port=" + std::to_string(socks_health)},
      socks_health);
  auto held =
      start_curl({"--http0.9", "--socks5-hostname", "127.0.0.1:" + std::to_string(socks_port),
                  "http://" + echo.address() + "/"});
  json s;
  json row;
  REQUIRE(eventually(
      [&] {
        s = daemon_status(socks_health);
        row = row_with(s["sessions"]["busiest"], "destination", echo.address());
        return !row.is_null() && row["bytes_down"].get<uint64_t>() > 0;
      },
      10s));
  INFO(s.dump(1));
  CHECK(row["via"] == "konnectivity");
  CHECK(s["summary"]["upstream"] == "konnectivity");
  held->kill(SIGKILL);

  uint16_t kp_port = konn::testsupport::free_tcp_port();
  uint16_t kp_health = konn::testsupport::free_tcp_port();
  auto kp = start_status_daemon(
      "kubeproxy-http",
      {"--mode=connect", "--port=" + std::to_string(kp_port), "--address=127.0.0.1", upstream,
       "--health-bind-address=127.0.0.1", "--health-port=" + std::to_string(kp_health)},
      kp_health);
  auto tunnel = start_curl({"--http0.9", "-p", "-x", "http://127.0.0.1:" + std::to_string(kp_port),
                            "http://" + echo.address() + "/"});
  REQUIRE(eventually(
      [&] {
        s = daemon_status(kp_health);
        row = row_with(s["connections"]["busiest"], "destination", echo.address());
        return !row.is_null() && row["bytes_down"].get<uint64_t>() > 0;
      },
      10s));
  CHECK(row["via"] == "konnectivity");
  CHECK(s["summary"]["upstream"] == "konnectivity");
  tunnel->kill(SIGKILL);
}
