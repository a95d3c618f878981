// /status.json and /status of a running proxy-server with three agents (issue 40): the JSON's
// shape, its counts against /metrics in the same state, the certificate expiry gauge, and the
// page as headless Chromium renders it (its DOM after the page's script ran, and a screenshot).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/tls/certificate_expiry.h"
#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/ha/ha_test_util.h"
#include "tests/integration/status/status_daemons.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/support/echo_server.h"
#include "tests/support/loopback.h"

using namespace konn::e2e;
using konn::testclient::Tunnel;
using konn::testsupport::eventually;
using nlohmann::json;

namespace {

// A server on a fixed admin port (loopback) with three agents, two tunnels open through them,
// and one dial the agent refused (a closed port).
struct StatusFleet {
  const konn::testsupport::TestCerts& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-status"};
  konn::testsupport::EchoServer echo;
  uint16_t admin_port = konn::testsupport::free_tcp_port();
  // Each agent's admin port; agent-a's first.
  std::vector<uint16_t> agent_admin_ports{konn::testsupport::free_tcp_port(),
                                          konn::testsupport::free_tcp_port(),
                                          konn::testsupport::free_tcp_port()};
  uint16_t agent_admin_port = agent_admin_ports[0];
  FleetServer server{
      certs,
      "s1",
      {"--admin-port=" + std::to_string(admin_port), "--admin-bind-address=127.0.0.1"}};
  std::vector<std::unique_ptr<FleetAgent>> agents;
  std::shared_ptr<grpc::Channel> channel;
  std::vector<std::unique_ptr<Tunnel>> tunnels;
  std::string refused;  // the destination of the failed dial

  StatusFleet() {
    server.start();
    for (const char* id : {"agent-a", "agent-b", "agent-c"}) {
      std::vector<std::string> args{"--admin-server-port=" +
                                    std::to_string(agent_admin_ports[agents.size()])};
      agents.push_back(std::make_unique<FleetAgent>(dir, certs, id, server.agent_port(), args));
    }
    REQUIRE(eventually([&] { return server.ready_agents() == 3; }, 20s));
    channel = server.channel();
    tunnels.push_back(echo_tunnel(channel, echo.address(), std::string(5000, 'x')));
    tunnels.push_back(echo_tunnel(channel, echo.address(), "ping"));
    refused = "127.0.0.1:" + std::to_string(konn::testsupport::free_tcp_port());
    REQUIRE_FALSE(Tunnel::dial(channel, refused, 10s).tunnel);
  }

  json status(const std::string& query = "", uint16_t port = 0) const {
    auto r = http_get_local(port != 0 ? port : admin_port, "/status.json" + query);
    REQUIRE(r.status == 200);
    return json::parse(r.body);
  }
};

// Where a test keeps what a person may want to look at afterwards (the screenshot).
std::string output_dir() {
  const char* env = std::getenv("KONN_TEST_OUTPUT_DIR");
  std::filesystem::path dir = env != nullptr && *env != '\0' ? env : "test-output";
  dir /= "status";
  std::filesystem::create_directories(dir);
  return std::filesystem::absolute(dir).string();
}

// Debian's chromium; the test fails, naming the package, when it is not there.
std::string chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return {};
}

konn::testsupport::RunResult run_chromium(const std::vector<std::string>& extra,
                                          const std::string& profile) {
  konn::testsupport::ProcessOptions o;
  o.binary = chromium();
  o.args = {"--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--user-data-dir=" + profile,
            "--virtual-time-budget=3000"};
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  return konn::testsupport::run_process(o, 60s);
}

}  // namespace

TEST_CASE(
    "status: /status.json lists agents, tunnels, failures, limits and certificates, and its "
    "counts agree with /metrics",
    "[e2e][status]") {
  KONN_REQUIRE_DAEMONS();
  StatusFleet f;
  auto s = f.status();
  INFO(s.dump(1));

  // Shape: every section, with the types a reader (the page, a script) relies on.
  for (const char* key : {"generated_at", "summary", "agents", "tunnels", "dial_failures", "limits",
                          "certificates", "flags"}) {
    CHECK(s.contains(key));
  }
  CHECK(s["summary"]["daemon"] == "proxy-server");
  CHECK(s["summary"]["server_id"] == "s1");
  CHECK(s["summary"]["version"].is_string());
  CHECK(s["summary"]["ready"] == true);
  CHECK(s["agents"]["total"] == 3);
  REQUIRE(s["agents"]["items"].size() == 3);
  std::vector<std::string> ids;
  uint64_t open = 0;
  for (const auto& a : s["agents"]["items"]) {
    ids.push_back(a["id"]);
    for (const char* key :
         {"identifiers", "peer", "connected_since", "flow_control", "last_error"}) {
      CHECK(a[key].is_string());
    }
    for (const char* key :
         {"open_tunnels", "pending_dials", "bytes_from_agent", "bytes_to_agent"}) {
      CHECK(a[key].is_number_unsigned());
    }
    CHECK(a["draining"] == false);
    CHECK(a["flow_control"] == "konn-credit");
    CHECK(a["peer"].get<std::string>().rfind("127.0.0.1:", 0) == 0);
    open += a["open_tunnels"].get<uint64_t>();
  }
  CHECK(ids == std::vector<std::string>{"agent-a", "agent-b", "agent-c"});
  CHECK(open == 2);
  CHECK(s["tunnels"]["total"] == 2);
  REQUIRE(s["tunnels"]["busiest"].size() == 2);
  const auto& busiest = s["tunnels"]["busiest"][0];
  CHECK(busiest["bytes_from_client"] == 5000);
  CHECK(busiest["bytes_to_client"] == 5000);
  CHECK(busiest["destination"] == f.echo.address());
  CHECK(busiest["frontend"] == "grpc");
  CHECK(busiest["state"] == "established");
  CHECK(s["tunnels"]["longest_lived"].size() == 2);
  CHECK(s["tunnels"]["longest_lived"][0]["bytes_from_client"] == 5000);  // dialled first

  // The refused dial: its reason, agent and destination; the agent's last error.
  REQUIRE(s["dial_failures"]["recent"].size() >= 1);
  const auto& failure = s["dial_failures"]["recent"][0];
  CHECK(failure["reason"] == "error_response");
  CHECK(failure["destination"] == f.refused);
  std::string failed_agent = failure["agent"];
  CHECK(failed_agent.rfind("agent-", 0) == 0);
  for (const auto& a : s["agents"]["items"]) {
    if (a["id"] == failed_agent) CHECK_FALSE(a["last_error"].get<std::string>().empty());
  }

  // Limits: each with its flag and how close it is.
  std::set<std::string> flags;
  for (const auto& l : s["limits"]) {
    flags.insert(l["flag"].get<std::string>());
    CHECK(l["ratio"].is_number());
  }
  CHECK(flags == std::set<std::string>{"--max-frontend-streams", "--max-pending-dials",
                                       "--max-pending-dials-per-agent", "--max-tunnels-per-agent"});

  // The same state through /metrics.
  auto m = f.server.metrics();
  REQUIRE(m.errors.empty());
  CHECK(m.value(kServer + "established_connections") == s["summary"]["established_tunnels"]);
  CHECK(m.value(kServer + "pending_backend_dials") == s["summary"]["pending_dials"]);
  CHECK(m.value(kServer + "ready_backend_connections") == s["summary"]["agents"]);
  CHECK(m.value(kServer + "grpc_connections", {{"service_method", "Connect"}}) ==
        s["summary"]["agent_streams"]);
  CHECK(m.value(kServer + "grpc_connections", {{"service_method", "Proxy"}}) ==
        s["summary"]["frontend_streams"]);
  double failures = 0;
  for (const auto& sample : m.families.at(kServer + "dial_failure_count").samples) {
    failures += sample.value;
  }
  CHECK(failures == s["dial_failures"]["total"]);
  CHECK(m.value(kServer + "dial_failure_count", {{"reason", "error_response"}}) == 1);

  // Certificates: the agent listener's, with the expiry /metrics has.
  bool serving = false;
  for (const auto& c : s["certificates"]) {
    if (c["listener"] != "agent" || c["kind"] != "serving") continue;
    serving = true;
    auto want = konn::core::tls::read_certificate_expiry(f.certs.server_crt);
    REQUIRE(want);
    auto epoch = std::chrono::system_clock::to_time_t(want->not_after);
    CHECK(m.value("konn_certificate_expiry_timestamp_seconds",
                  {{"listener", "agent"}, {"kind", "serving"}}) == static_cast<double>(epoch));
    CHECK(c["expires_in_seconds"].get<double>() > 0);
    CHECK(c["error"] == "");
  }
  CHECK(serving);
  CHECK(
      m.value("konn_certificate_expiry_timestamp_seconds", {{"listener", "agent"}, {"kind", "ca"}})
          .has_value());

  // Pages: one agent per page, the second page holds the second agent.
  auto page = f.status("?agents_offset=1&agents_limit=1");
  CHECK(page["agents"]["total"] == 3);
  REQUIRE(page["agents"]["items"].size() == 1);
  CHECK(page["agents"]["items"][0]["id"] == "agent-b");

  // No secret material: no PEM block, no key, no Authorization header.
  auto body = http_get_local(f.admin_port, "/status.json").body;
  CHECK(body.find("BEGIN") == std::string::npos);
  CHECK(body.find("PRIVATE") == std::string::npos);
  CHECK(body.find("uthorization") == std::string::npos);
  // The health port serves no status page.
  CHECK(http_get_local(f.server.health_port(), "/status.json").status == 404);
}

TEST_CASE("status: the agent's /status.json lists its server, tunnels, refusals and certificates",
          "[e2e][status]") {
  KONN_REQUIRE_DAEMONS();
  StatusFleet f;
  // Which agent took the refused dial is the server's choice: ask it.
  std::string failed_agent = f.status()["dial_failures"]["recent"][0]["agent"];
  auto s = f.status("", f.agent_admin_port);
  INFO(s.dump(1));
  CHECK(s["summary"]["daemon"] == "proxy-agent");
  CHECK(s["summary"]["agent_id"] == "agent-a");
  CHECK(s["summary"]["servers_connected"] == 1);
  REQUIRE(s["servers"].size() == 1);
  const auto& server = s["servers"][0];
  CHECK(server["server_id"] == "s1");
  CHECK(server["connected"] == true);
  CHECK(server["draining"] == false);
  CHECK(server["flow_control"] == "konn-credit");
  CHECK(server["since"].get<std::string>().size() == 20);
  CHECK(server["target"] == "127.0.0.1:" + std::to_string(f.server.agent_port()));
  auto a = f.agents[0]->metrics();
  CHECK(a.value("konnectivity_network_proxy_agent_open_endpoint_connections") ==
        s["tunnels"]["endpoint_connections"]);
  CHECK(server["tunnels"] == s["tunnels"]["open"]);
  if (failed_agent == "agent-a") {
    REQUIRE(s["refusals"]["recent"].size() == 1);
    CHECK(s["refusals"]["recent"][0]["reason"] == "dial_failed");
    CHECK(s["refusals"]["recent"][0]["error"].get<std::string>().find(f.refused) !=
          std::string::npos);
    CHECK(s["refusals"]["counts"]["dial_failed"] == 1);
  } else {
    CHECK(s["refusals"]["recent"].empty());
  }
  bool client = false;
  for (const auto& c : s["certificates"]) {
    if (c["listener"] == "server" && c["kind"] == "client") {
      client = true;
      CHECK(c["error"] == "");
      auto want = konn::core::tls::read_certificate_expiry(f.certs.agent_crt);
      REQUIRE(want);
      CHECK(a.value("konn_certificate_expiry_timestamp_seconds",
                    {{"listener", "server"}, {"kind", "client"}}) ==
            static_cast<double>(std::chrono::system_clock::to_time_t(want->not_after)));
    }
  }
  CHECK(client);
  auto body = http_get_local(f.agent_admin_port, "/status.json").body;
  CHECK(body.find("BEGIN") == std::string::npos);

  // The two open tunnels, each listed by the agent that carries it, with its bytes.
  std::vector<json> listed;
  for (uint16_t port : f.agent_admin_ports) {
    auto other = f.status("", port);
    CHECK(other["tunnels"]["busiest"].size() == other["tunnels"]["open"]);
    for (const auto& t : other["tunnels"]["busiest"]) listed.push_back(t);
  }
  REQUIRE(listed.size() == 2);
  std::sort(listed.begin(), listed.end(), [](const json& x, const json& y) {
    return x["bytes_to_endpoint"].get<uint64_t>() > y["bytes_to_endpoint"].get<uint64_t>();
  });
  CHECK(listed[0]["destination"] == f.echo.address());
  CHECK(listed[0]["bytes_to_endpoint"] == 5000);
  CHECK(listed[0]["bytes_from_endpoint"] == 5000);
  CHECK(listed[0]["server_id"] == "s1");
  CHECK(listed[1]["bytes_to_endpoint"] == 4);

  // The server goes: the agent shows it lost, with why.
  f.server.kill();
  REQUIRE(eventually(
      [&] {
        auto now = f.status("", f.agent_admin_port);
        return now["summary"]["servers_connected"] == 0 && now["servers"].size() >= 1 &&
               now["servers"][0]["connected"] == false;
      },
      20s));
  auto lost = f.status("", f.agent_admin_port);
  INFO(lost.dump(1));
  CHECK_FALSE(lost["servers"][0]["last_error"].get<std::string>().empty());
  CHECK(lost["server_events"].size() >= 2);
}

TEST_CASE("status: headless Chromium renders the page: agents, tunnels and a dial failure",
          "[e2e][status][chromium]") {
  KONN_REQUIRE_DAEMONS();
  std::string browser = chromium();
  INFO("Debian's chromium is not installed: scripts/setup.sh installs it");
  REQUIRE_FALSE(browser.empty());
  StatusFleet f;
  std::string url = "http://127.0.0.1:" + std::to_string(f.admin_port) + "/status";
  konn::testsupport::TempDir profile{"konn-chromium"};
  std::string out = output_dir();
  std::string dom_file = out + "/status.dom.html";

  konn::testsupport::ProcessOptions o;
  auto dump = run_chromium({"--dump-dom", url}, profile.path());
  INFO("chromium: " << dump.output.substr(0, 4000));
  REQUIRE(dump.exit_code == 0);
  std::ofstream(dom_file) << dump.output;
  const std::string& dom = dump.output;
  // The script ran: the sections exist only once it rendered the inline JSON.
  CHECK(dom.find("<section id=\"agents\">") != std::string::npos);
  for (const char* id : {"agent-a", "agent-b", "agent-c"}) {
    CHECK(dom.find("<tr data-key=\"" + std::string(id) + "\">") != std::string::npos);
  }
  CHECK(dom.find("<tr data-key=\"established_tunnels\"><th>established_tunnels</th><td>2</td>") !=
        std::string::npos);
  CHECK(dom.find("<section id=\"dial_failures\">") != std::string::npos);
  CHECK(dom.find(">error_response</td>") != std::string::npos);
  CHECK(dom.find(">" + f.refused + "</td>") != std::string::npos);
  CHECK(dom.find("as of 20") != std::string::npos);

  std::string png = out + "/status.png";
  std::filesystem::remove(png);
  auto shot = run_chromium({"--screenshot=" + png, "--window-size=1400,1800", url}, profile.path());
  INFO("chromium: " << shot.output.substr(0, 4000));
  CHECK(shot.exit_code == 0);
  REQUIRE(std::filesystem::exists(png));
  CHECK(std::filesystem::file_size(png) > 10000);
  WARN("status page screenshot: " << png << " (DOM: " << dom_file << ")");
}

TEST_CASE("status: socks5 and kubeproxy-http export the expiry of their certificates",
          "[e2e][status]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  auto expiry = [](const std::string& path) {
    auto e = konn::core::tls::read_certificate_expiry(path);
    REQUIRE(e);
    return static_cast<double>(std::chrono::system_clock::to_time_t(e->not_after));
  };

  // socks5 towards a proxy-server over mTLS (none listens: the files are what counts here).
  uint16_t socks_health = konn::testsupport::free_tcp_port();
  auto socks = start_status_daemon(
      "socks5",
      {"--port=0", "--bind-address=127.0.0.1", "--health-bind-address=127.0.0.1",
       "--health-port=" + std::to_string(socks_health), "--konnectivity-address=127.0.0.1:1",
       "--konnectivity-ca-cert=" + certs.ca_crt, "--konnectivity-client-cert=" + certs.client_crt,
       "--konnectivity-client-key=" + certs.client_key},
      socks_health);
  auto m = parse_prometheus_text(http_get_local(socks_health, "/metrics").body);
  CHECK(m.value("konn_certificate_expiry_timestamp_seconds",
                {{"listener", "konnectivity"}, {"kind", "client"}}) == expiry(certs.client_crt));
  CHECK(m.value("konn_certificate_expiry_timestamp_seconds",
                {{"listener", "konnectivity"}, {"kind", "ca"}}) == expiry(certs.ca_crt));

  // kubeproxy-http's CONNECT mode behind TLS.
  uint16_t kp_health = konn::testsupport::free_tcp_port();
  auto kp = start_status_daemon(
      "kubeproxy-http",
      {"--mode=connect", "--port=0", "--health-bind-address=127.0.0.1",
       "--health-port=" + std::to_string(kp_health), "--tls-cert-file=" + certs.server_crt,
       "--tls-private-key-file=" + certs.server_key},
      kp_health);
  m = parse_prometheus_text(http_get_local(kp_health, "/metrics").body);
  CHECK(m.value("konn_certificate_expiry_timestamp_seconds",
                {{"listener", "listener"}, {"kind", "serving"}}) == expiry(certs.server_crt));
}

TEST_CASE("status: the server's certificate expiry gauge follows a reload of its files",
          "[e2e][status]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-certexp"};
  namespace fs = std::filesystem;
  fs::path root(dir.path());
  // A second key pair valid for 3 days: its notAfter differs from the test certificates'.
  konn::testsupport::ProcessOptions gen;
  gen.binary = "openssl";
  gen.search_path = true;
  gen.args = {"req",
              "-x509",
              "-newkey",
              "ec",
              "-pkeyopt",
              "ec_paramgen_curve:P-256",
              "-nodes",
              "-keyout",
              (root / "short.key").string(),
              "-out",
              (root / "short.crt").string(),
              "-days",
              "3",
              "-subj",
              "/CN=localhost",
              "-addext",
              "subjectAltName=IP:127.0.0.1"};
  auto made = konn::testsupport::run_process(gen, 30s);
  INFO(made.output);
  REQUIRE(made.exit_code == 0);
  fs::create_directories(root / "live");
  fs::copy_file(certs.server_crt, root / "live/server.crt");
  fs::copy_file(certs.server_key, root / "live/server.key");

  FleetServer server{
      certs,
      "s1",
      {"--cluster-cert=" + (root / "live/server.crt").string(),
       "--cluster-key=" + (root / "live/server.key").string(), "--cert-reload-interval=1s"}};
  server.start();
  auto gauge = [&] {
    return server.metric("konn_certificate_expiry_timestamp_seconds",
                         {{"listener", "agent"}, {"kind", "serving"}});
  };
  auto expiry = [](const fs::path& path) {
    auto e = konn::core::tls::read_certificate_expiry(path.string());
    REQUIRE(e);
    return static_cast<double>(std::chrono::system_clock::to_time_t(e->not_after));
  };
  CHECK(gauge() == expiry(certs.server_crt));
  // Replaced as Kubernetes does with a Secret: each file renamed into place.
  for (const char* name : {"key", "crt"}) {
    fs::copy_file(root / ("short." + std::string(name)), root / "live/tmp");
    fs::rename(root / "live/tmp", root / ("live/server." + std::string(name)));
  }
  double want = expiry(root / "short.crt");
  CHECK(eventually([&] { return gauge() == want; }, 20s));
}

TEST_CASE("status: beyond loopback the page needs --status-page-off-loopback", "[e2e][status]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  uint16_t closed_port = konn::testsupport::free_tcp_port();
  FleetServer closed{
      certs, "s1", {"--admin-port=" + std::to_string(closed_port), "--admin-bind-address=0.0.0.0"}};
  closed.start();
  REQUIRE(eventually([&] { return konn::testsupport::tcp_port_accepts(closed_port); }, 10s));
  check_status_page_refused(closed_port);

  uint16_t open_port = konn::testsupport::free_tcp_port();
  FleetServer open{certs,
                   "s2",
                   {"--admin-port=" + std::to_string(open_port), "--admin-bind-address=0.0.0.0",
                    "--status-page-off-loopback"}};
  open.start();
  REQUIRE(eventually([&] { return konn::testsupport::tcp_port_accepts(open_port); }, 10s));
  auto shown = http_get_local(open_port, "/status.json");
  CHECK(shown.status == 200);
  CHECK(json::parse(shown.body)["summary"]["server_id"] == "s2");
}
