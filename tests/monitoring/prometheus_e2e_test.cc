// manifests/monitoring against a real Prometheus (Debian's `prometheus`, started here on
// loopback): it scrapes a running proxy-server and agent (one tunnel open, one dial refused), loads
// konn-rules.yaml, and every expression of the rules and of the Grafana dashboard is evaluated:
// each must run, and each metric selector it names must return series. So no alert or panel
// names a metric the daemons do not export.
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/ha/ha_test_util.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/support/echo_server.h"
#include "tests/support/loopback.h"

using namespace konn::e2e;
using konn::testclient::Tunnel;
using konn::testsupport::eventually;
using nlohmann::json;

namespace {

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// The result of an instant query; `error` set when Prometheus refused it.
struct QueryResult {
  std::string error;
  json result = json::array();
};

QueryResult query(uint16_t port, const std::string& expr) {
  auto r = http_get_local(port, "/api/v1/query?query=" + url_encode(expr));
  QueryResult out;
  if (r.status == 0) {
    out.error = "no answer";
    return out;
  }
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") {
    out.error = r.body;
    return out;
  }
  out.result = j["data"]["result"];
  return out;
}

// Metric selectors an expression names: konn's metrics and `up`, with their label matchers.
std::vector<std::string> selectors(const std::string& expr) {
  static const std::regex re(R"(\b((?:konn|konnectivity)_[a-zA-Z0-9_:]*|up)(\{[^}]*\})?)");
  std::vector<std::string> out;
  for (std::sregex_iterator it(expr.begin(), expr.end(), re), end; it != end; ++it) {
    out.push_back((*it)[0].str());
  }
  return out;
}

std::string prometheus_binary() {
  for (const char* p : {"/usr/bin/prometheus", "/usr/local/bin/prometheus"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return {};
}

}  // namespace

TEST_CASE(
    "monitoring: every rule and dashboard expression returns data from a real Prometheus "
    "scraping the daemons",
    "[e2e][monitoring]") {
  KONN_REQUIRE_DAEMONS();
  std::string prometheus = prometheus_binary();
  INFO("Debian's prometheus is not installed: scripts/setup.sh installs it");
  REQUIRE_FALSE(prometheus.empty());
  const std::string mon = konn::testsupport::source_dir() + "/manifests/monitoring";

  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-prom"};
  konn::testsupport::EchoServer echo;
  FleetServer server(certs, "s1", {});
  server.start();
  FleetAgent agent(dir, certs, "a1", server.agent_port(), {});
  REQUIRE(eventually([&] { return server.ready_agents() == 1 && agent.servers() == 1; }, 20s));
  auto channel = server.channel();
  auto tunnel = echo_tunnel(channel, echo.address());
  std::string closed = "127.0.0.1:" + std::to_string(konn::testsupport::free_tcp_port());
  REQUIRE_FALSE(Tunnel::dial(channel, closed, 10s).tunnel);

  // Prometheus: 1 s scrapes and rule evaluations, the rules file as shipped.
  uint16_t port = konn::testsupport::free_tcp_port();
  std::string config = dir.file("prometheus.yml");
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        << "rule_files:\n  - " << mon << "/konn-rules.yaml\n"
                        << "scrape_configs:\n"
                        << "  - job_name: konnectivity-server\n    static_configs:\n"
                        << "      - targets: ['127.0.0.1:" << server.health_port() << "']\n"
                        << "  - job_name: konnectivity-agent\n    static_configs:\n"
                        << "      - targets: ['127.0.0.1:" << agent.health_port() << "']\n";
  konn::testsupport::ProcessOptions o;
  o.binary = prometheus;
  o.log_path = dir.file("prometheus.log");
  o.args = {"--config.file=" + config, "--storage.tsdb.path=" + dir.file("tsdb"),
            "--web.listen-address=127.0.0.1:" + std::to_string(port)};
  konn::testsupport::Process prom(o);
  INFO("prometheus log:\n" << prom.log());
  REQUIRE(prom.wait_for_tcp_port(port, 30s));
  // Both targets up, and enough scrapes for rate() and changes() (two samples in a window).
  REQUIRE(eventually(
      [&] {
        auto up = query(port, "sum(up) == 2 and sum(count_over_time(up[1m])) >= 6");
        return up.error.empty() && up.result.size() == 1;
      },
      30s));

  std::vector<std::pair<std::string, std::string>> exprs;  // where, expression
  auto rules = YAML::LoadFile(mon + "/konn-rules.yaml");
  for (const auto& group : rules["groups"]) {
    for (const auto& rule : group["rules"]) {
      exprs.emplace_back("alert " + rule["alert"].as<std::string>(),
                         rule["expr"].as<std::string>());
    }
  }
  json dash = json::parse(std::ifstream(mon + "/konn-dashboard.json"));
  for (const auto& panel : dash["panels"]) {
    for (const auto& target : panel["targets"]) {
      std::string e = target["expr"];
      e = std::regex_replace(e, std::regex(R"(\$__rate_interval)"), "1m");
      exprs.emplace_back("panel " + panel["title"].get<std::string>(), e);
    }
  }
  REQUIRE(exprs.size() >= 9 + 12);

  std::set<std::string> checked;
  for (const auto& [where, expr] : exprs) {
    INFO(where << ": " << expr);
    auto whole = query(port, expr);
    CHECK(whole.error.empty());
    auto sels = selectors(expr);
    CHECK_FALSE(sels.empty());
    for (const auto& sel : sels) {
      if (!checked.insert(sel).second) continue;
      INFO("selector " << sel);
      auto r = query(port, sel);
      CHECK(r.error.empty());
      CHECK(r.result.size() >= 1);
    }
  }
  // Both daemons' series under the job names the rules use.
  CHECK(query(port, "konn_ready{job=\"konnectivity-server\"} == 1").result.size() == 1);
  CHECK(query(port, "konn_ready{job=\"konnectivity-agent\"} == 1").result.size() == 1);
  CHECK(query(port, "konn_certificate_expiry_timestamp_seconds{job=\"konnectivity-agent\"}")
            .result.size() == 2);

  // Prometheus evaluated every rule without an error; none fires in this healthy state.
  REQUIRE(eventually(
      [&] {
        auto r = http_get_local(port, "/api/v1/rules");
        auto j = json::parse(r.body, nullptr, false);
        if (j.is_discarded()) return false;
        size_t evaluated = 0;
        for (const auto& g : j["data"]["groups"]) {
          for (const auto& rule : g["rules"]) {
            if (!rule.value("lastEvaluation", "").empty() &&
                rule.value("lastEvaluation", "").rfind("0001-", 0) != 0) {
              ++evaluated;
            }
          }
        }
        return evaluated == 9;
      },
      20s));
  auto j = json::parse(http_get_local(port, "/api/v1/rules").body);
  for (const auto& g : j["data"]["groups"]) {
    for (const auto& rule : g["rules"]) {
      INFO("rule " << rule.value("name", "") << ": " << rule.dump());
      CHECK(rule["health"] == "ok");
      CHECK(rule["state"] == "inactive");
    }
  }
}
