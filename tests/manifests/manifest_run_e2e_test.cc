// The seed manifests and the upstream documentation's command lines, run for real: the server
// static pod and the agent DaemonSet are rendered with `kubectl kustomize`, and their containers'
// command lines start the built daemons on loopback with every flag they pass. Only what names
// the cluster is substituted: certificate, kubeconfig and token paths by test files (the
// kubeconfig points at a fake apiserver that answers TokenReviews and Leases), fixed ports by
// free ones, the server address by 127.0.0.1; listeners are bound to 127.0.0.1 with the konn
// bind flags appended. Then, as the kubelet and Prometheus would: the liveness probes' paths on
// the health ports answer, readiness turns 200 once the agent holds a stream, a dial goes
// through the unix socket kube-apiserver uses, and every /metrics scrape passes
// `promtool check metrics` (setup.sh installs promtool).
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include <catch2/catch.hpp>
#include <yaml-cpp/yaml.h>

#include "test-client/channel.h"
#include "test-client/tunnel.h"
#include "tests/support/echo_server.h"
#include "tests/support/fake_apiserver.h"
#include "tests/support/loopback.h"
#include "tests/support/process_runner.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

using namespace std::chrono_literals;
using konn::testsupport::eventually;
using konn::testsupport::FakeApiserver;
using konn::testsupport::Process;
using konn::testsupport::ProcessOptions;
using konn::testsupport::TempDir;

namespace {

const std::string kAgentAccount = "system:serviceaccount:kube-system:konnectivity-agent";

struct Container {
  std::vector<std::string> args;  // command (without the binary) then args, as written
  std::vector<std::pair<std::string, std::string>> env;
  std::map<std::string, std::string> vars;  // for $(VAR)
  std::string liveness_path;
  int liveness_port = 0;
  std::string readiness_path;
  int readiness_port = 0;
};

std::string scalar(const YAML::Node& n) { return n && n.IsScalar() ? n.as<std::string>() : ""; }

// Renders `dir` and returns the first container whose image runs `daemon`.
Container rendered_container(const std::string& dir, const std::string& daemon) {
  TempDir out{"konn-render"};
  ProcessOptions o;
  o.binary = KONN_KUBECTL;
  o.search_path = true;
  o.args = {"kustomize", dir};
  o.stdout_path = out.file("rendered.yaml");
  auto r = konn::testsupport::run_process(o, 60s);
  INFO("kubectl kustomize " << dir << ": " << r.output);
  REQUIRE(r.exit_code == 0);
  std::map<std::string, YAML::Node> config_maps;
  std::vector<YAML::Node> docs = YAML::LoadAllFromFile(out.file("rendered.yaml"));
  for (const auto& d : docs) {
    if (scalar(d["kind"]) == "ConfigMap") config_maps[scalar(d["metadata"]["name"])] = d["data"];
  }
  for (const auto& d : docs) {
    std::string kind = scalar(d["kind"]);
    YAML::Node spec;
    if (kind == "Pod") {
      spec = d["spec"];
    } else if (kind == "DaemonSet" || kind == "Deployment") {
      spec = d["spec"]["template"]["spec"];
    } else {
      continue;
    }
    for (const auto& c : spec["containers"]) {
      if (scalar(c["image"]).find("/" + daemon + ":") == std::string::npos) continue;
      Container out_c;
      for (size_t i = 1; i < c["command"].size(); ++i)
        out_c.args.push_back(scalar(c["command"][i]));
      for (const auto& a : c["args"]) out_c.args.push_back(scalar(a));
      for (const auto& e : c["env"]) {
        std::string name = scalar(e["name"]);
        std::string value = scalar(e["value"]);
        if (e["valueFrom"]["fieldRef"]) {
          std::string field = scalar(e["valueFrom"]["fieldRef"]["fieldPath"]);
          value = field == "spec.nodeName" ? "node-a" : "10.0.0.10";  // nodeName, hostIP
        } else if (e["valueFrom"]["configMapKeyRef"]) {
          const auto& ref = e["valueFrom"]["configMapKeyRef"];
          value = scalar(config_maps[scalar(ref["name"])][scalar(ref["key"])]);
        }
        out_c.env.emplace_back(name, value);
        out_c.vars[name] = value;
      }
      if (YAML::Node live = c["livenessProbe"]) {
        out_c.liveness_path = scalar(live["httpGet"]["path"]);
        out_c.liveness_port = live["httpGet"]["port"].as<int>(0);
      }
      if (YAML::Node ready = c["readinessProbe"]) {
        out_c.readiness_path = scalar(ready["httpGet"]["path"]);
        out_c.readiness_port = ready["httpGet"]["port"].as<int>(0);
      }
      return out_c;
    }
  }
  FAIL("no " << daemon << " container in " << dir);
  return {};
}

// Kubernetes' $(VAR) expansion.
std::string expand(const std::string& in, const std::map<std::string, std::string>& vars) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in.compare(i, 2, "$(") == 0) {
      auto close = in.find(')', i);
      auto it = vars.find(in.substr(i + 2, close - i - 2));
      if (close != std::string::npos && it != vars.end()) {
        out += it->second;
        i = close;
        continue;
      }
    }
    out += in[i];
  }
  return out;
}

// The command line with $(VAR) expanded and `--flag=value` replaced where `swaps` names the
// flag. Every flag of the manifest stays; a swapped flag must be there (so the test follows the
// manifest). `extra` is appended.
std::vector<std::string> command_line(const Container& c,
                                      const std::map<std::string, std::string>& swaps,
                                      const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  std::map<std::string, bool> used;
  for (const auto& raw : c.args) {
    std::string arg = expand(raw, c.vars);
    auto eq = arg.find('=');
    std::string flag = arg.substr(0, eq);
    if (auto it = swaps.find(flag); it != swaps.end() && eq != std::string::npos) {
      arg = flag + "=" + it->second;
      used[flag] = true;
    }
    out.push_back(arg);
  }
  for (const auto& [flag, value] : swaps) {
    INFO("the manifest passes " << flag);
    CHECK(used[flag]);
  }
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

struct Answer {
  int status = 0;
  std::string body;
};

Answer get(uint16_t port, const std::string& path) {
  ProcessOptions o;
  o.binary = "curl";
  o.search_path = true;
  o.args = {"-s",
            "-m",
            "5",
            "-o",
            "/dev/stdout",
            "-w",
            "\n%{http_code}",
            "http://127.0.0.1:" + std::to_string(port) + path};
  auto r = konn::testsupport::run_process(o, 10s);
  Answer a;
  auto nl = r.output.rfind('\n');
  if (nl == std::string::npos) return a;
  a.status = std::atoi(r.output.c_str() + nl + 1);
  a.body = r.output.substr(0, nl);
  return a;
}

std::string promtool_path() {
  for (const char* p : {"/usr/local/bin/promtool", "/usr/bin/promtool"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return {};
}

// `promtool check metrics` on one scrape: it must parse (exit 0, or 3 for lint findings only,
// which are about upstream's counter names without _total that konn keeps on purpose).
void check_metrics(uint16_t port, const TempDir& dir, const std::string& who) {
  auto scrape = get(port, "/metrics");
  INFO(who << " /metrics on port " << port);
  REQUIRE(scrape.status == 200);
  std::string tool = promtool_path();
  REQUIRE_FALSE(tool.empty());  // scripts/setup.sh installs it
  std::string file = dir.file(who + ".prom");
  std::ofstream(file) << scrape.body;
  ProcessOptions o;
  o.binary = tool;
  o.args = {"check", "metrics"};
  o.stdin_path = file;
  auto run = konn::testsupport::run_process(o, 30s);
  INFO("promtool: " << run.output);
  CHECK((run.exit_code == 0 || run.exit_code == 3));
  CHECK(run.output.find("error while linting") == std::string::npos);
  // Every finding is one of upstream's names (lint only, never a type or format problem).
  size_t at = 0;
  while ((at = run.output.find('\n', at)) != std::string::npos) {
    ++at;
    std::string line = run.output.substr(at, run.output.find('\n', at) - at);
    if (line.empty()) continue;
    INFO(line);
    CHECK((line.find("_count counter metrics should have \"_total\" suffix") != std::string::npos ||
           line.find("_count non-histogram and non-summary metrics should not have") !=
               std::string::npos));
  }
}

// The probes a kubelet and Prometheus run against one daemon.
void probe(const std::string& who, uint16_t health, uint16_t admin, const std::string& live_path,
           const TempDir& dir) {
  auto live = get(health, live_path);
  INFO(who << " liveness " << live_path);
  CHECK(live.status == 200);
  CHECK(live.body == "ok");
  CHECK(eventually([&] { return get(health, "/readyz").status == 200; }, 30s));
  check_metrics(health, dir, who + "-health");
  check_metrics(admin, dir, who + "-admin");
}

// A fake apiserver for the server's TokenReviews and Leases, and the agent's token.
struct Cluster {
  const konn::testsupport::TestCerts& certs = konn::testsupport::test_certs();
  TempDir dir{"konn-manifest-run"};
  FakeApiserver api{certs.server_crt, certs.server_key, "server-kubeconfig-token"};
  std::string kubeconfig = api.write_kubeconfig(dir.path(), certs.ca_crt);
  std::string token_file = dir.file("konnectivity-agent-token");
  std::string socket = dir.file("konnectivity-server.socket");
  uint16_t agent_port = konn::testsupport::free_tcp_port();
  uint16_t server_admin = konn::testsupport::free_tcp_port();
  uint16_t server_health = konn::testsupport::free_tcp_port();
  uint16_t agent_health = konn::testsupport::free_tcp_port();
  uint16_t agent_admin = konn::testsupport::free_tcp_port();
  konn::testsupport::EchoServer echo;

  Cluster() {
    std::ofstream(token_file) << "projected-agent-token";
    api.set_token("projected-agent-token", {FakeApiserver::Answer::Authenticated, kAgentAccount});
  }

  std::unique_ptr<Process> start(const std::string& daemon, std::vector<std::string> args,
                                 std::vector<std::pair<std::string, std::string>> env) {
    ProcessOptions o;
    o.binary = daemon;
    o.args = std::move(args);
    o.env = std::move(env);
    o.log_path = dir.file(daemon + ".log");
    return std::make_unique<Process>(std::move(o));
  }

  // A tunnel through the unix socket kube-apiserver dials, to the echo server.
  void dial_through() {
    konn::testclient::ChannelConfig c;
    c.uds_path = socket;
    auto channel = konn::testclient::make_channel(c);
    auto d = konn::testclient::Tunnel::dial(channel, echo.address(), 10s);
    INFO("dial: " << d.error);
    REQUIRE(d.tunnel);
    REQUIRE(d.tunnel->write("through the manifests"));
    std::string got;
    while (got.size() < 21) {
      std::string chunk;
      REQUIRE(d.tunnel->read_for(&chunk, 10s) == konn::testclient::Tunnel::ReadStatus::Data);
      got += chunk;
    }
    CHECK(got == "through the manifests");
    CHECK(d.tunnel->close(5s).empty());
  }
};

std::string port(uint16_t p) { return std::to_string(p); }

}  // namespace

TEST_CASE("manifests: the server static pod and agent DaemonSet run with every flag they pass",
          "[e2e][manifests]") {
  Cluster k;
  auto server_c =
      rendered_container(KONN_SOURCE_DIR "/manifests/base/proxy-server-static", "proxy-server");
  auto agent_c = rendered_container(KONN_SOURCE_DIR "/manifests/base/proxy-agent", "proxy-agent");

  // The server: the liveness probe names its health port.
  REQUIRE(server_c.liveness_port > 0);
  auto server_args =
      command_line(server_c,
                   {{"--uds-name", k.socket},
                    {"--cluster-cert", k.certs.server_crt},
                    {"--cluster-key", k.certs.server_key},
                    {"--kubeconfig", k.kubeconfig},
                    {"--agent-port", port(k.agent_port)},
                    {"--admin-port", port(k.server_admin)},
                    {"--health-port", port(k.server_health)}},
                   {"--agent-bind-address=127.0.0.1", "--health-bind-address=127.0.0.1"});
  CHECK(std::to_string(server_c.liveness_port) == "8134");  // the port the manifest's flag sets
  auto server = k.start("proxy-server", server_args, server_c.env);
  REQUIRE(server->wait_for_tcp_port(k.server_health, 20s));
  REQUIRE(server->wait_for_unix_socket(k.socket, 20s));

  auto agent_args = command_line(agent_c,
                                 {{"--ca-cert", k.certs.ca_crt},
                                  {"--proxy-server-host", "127.0.0.1"},
                                  {"--proxy-server-port", port(k.agent_port)},
                                  {"--service-account-token-path", k.token_file},
                                  {"--health-server-port", port(k.agent_health)},
                                  {"--admin-server-port", port(k.agent_admin)}},
                                 {"--health-server-host=127.0.0.1"});
  CHECK(agent_c.liveness_port == 8093);
  CHECK(agent_c.readiness_path == "/readyz");
  auto agent = k.start("proxy-agent", agent_args, agent_c.env);
  REQUIRE(agent->wait_for_tcp_port(k.agent_health, 20s));

  INFO("server log:\n" << server->log() << "\nagent log:\n" << agent->log());
  probe("server", k.server_health, k.server_admin, server_c.liveness_path, k.dir);
  probe("agent", k.agent_health, k.agent_admin, agent_c.liveness_path, k.dir);
  // The agent was admitted by TokenReview, identified by the node, and the server published its
  // Lease under the manifest's id (PROXY_SERVER_ID from the node name).
  CHECK(k.api.reviews() >= 1);
  CHECK(server->count_in_log("agent connected agentID=node-a") == 1);
  CHECK(server->count_in_log("identifiers=host=node-a&ipv4=10.0.0.10") == 1);
  CHECK(eventually(
      [&] { return k.api.lease("kube-system", "konnectivity-proxy-server-node-a").has_value(); },
      20s));
  k.dial_through();
  CHECK(server->running());
  CHECK(agent->running());
}

TEST_CASE("manifests: the Kubernetes documentation's command lines run as written",
          "[e2e][manifests]") {
  // "Set up Konnectivity service": the konnectivity-server static pod and the konnectivity-agent
  // DaemonSet, paths and ports swapped as above (the server line is also checked flag by flag
  // in proxy-server/server_options_test.cc).
  Cluster k;
  Container server_c;
  server_c.args = {"--logtostderr=true",
                   "--uds-name=/etc/kubernetes/konnectivity-server/konnectivity-server.socket",
                   "--delete-existing-uds-file",
                   "--cluster-cert=/etc/kubernetes/pki/apiserver.crt",
                   "--cluster-key=/etc/kubernetes/pki/apiserver.key",
                   "--mode=grpc",
                   "--server-port=0",
                   "--agent-port=8132",
                   "--admin-port=8133",
                   "--health-port=8134",
                   "--agent-namespace=kube-system",
                   "--agent-service-account=konnectivity-agent",
                   "--kubeconfig=/etc/kubernetes/konnectivity-server.conf",
                   "--authentication-audience=system:konnectivity-server"};
  auto server =
      k.start("proxy-server",
              command_line(server_c,
                           {{"--uds-name", k.socket},
                            {"--cluster-cert", k.certs.server_crt},
                            {"--cluster-key", k.certs.server_key},
                            {"--kubeconfig", k.kubeconfig},
                            {"--agent-port", port(k.agent_port)},
                            {"--admin-port", port(k.server_admin)},
                            {"--health-port", port(k.server_health)}},
                           {"--agent-bind-address=127.0.0.1", "--health-bind-address=127.0.0.1"}),
              {});
  REQUIRE(server->wait_for_tcp_port(k.server_health, 20s));
  Container agent_c;
  agent_c.args = {"--logtostderr=true",
                  "--ca-cert=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
                  "--proxy-server-host=35.225.206.7",
                  "--proxy-server-port=8132",
                  "--admin-server-port=8133",
                  "--health-server-port=8134",
                  "--service-account-token-path=/var/run/secrets/tokens/konnectivity-agent-token"};
  auto agent = k.start("proxy-agent",
                       command_line(agent_c,
                                    {{"--ca-cert", k.certs.ca_crt},
                                     {"--proxy-server-host", "127.0.0.1"},
                                     {"--proxy-server-port", port(k.agent_port)},
                                     {"--admin-server-port", port(k.agent_admin)},
                                     {"--health-server-port", port(k.agent_health)},
                                     {"--service-account-token-path", k.token_file}},
                                    {"--health-server-host=127.0.0.1"}),
                       {});
  REQUIRE(agent->wait_for_tcp_port(k.agent_health, 20s));
  INFO("server log:\n" << server->log() << "\nagent log:\n" << agent->log());
  probe("server", k.server_health, k.server_admin, "/healthz", k.dir);
  probe("agent", k.agent_health, k.agent_admin, "/healthz", k.dir);
  k.dial_through();
}
