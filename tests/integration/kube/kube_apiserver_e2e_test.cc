// A real kube-apiserver v1.20.2 (scripts/kube-apiserver.sh builds it) with a real etcd, sending
// its egress traffic ("cluster": webhooks, CRD conversion, aggregated APIs, kubelet) through the
// built proxy-server and proxy-agent, driven with kubectl. One case per egress mode kube-apiserver
// has for a Konnectivity server: GRPC over a unix socket, HTTPConnect over a unix socket, and
// HTTPConnect over TCP with mutual TLS. The backends are kube-test-backend (backend/main.go):
// webhooks, a conversion webhook and an aggregated API on one HTTPS port, a fake kubelet on
// another, counters on a plain HTTP /stats port.
//
// Every check asserts that the proxy-server carried the traffic (its `bytes_total` and
// `dial_duration_seconds` metrics on the admin port), and the last one kills the agent and
// requires the same requests to fail: the backends are on loopback, where the apiserver could
// reach them directly, so only that tells a tunnelled request from a bypass.
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/loopback.h"
#include "tests/support/process_runner.h"
#include "tests/support/prom_text.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

using namespace std::chrono_literals;
using konn::testsupport::eventually;
using konn::testsupport::free_tcp_port;
using konn::testsupport::Process;
using konn::testsupport::ProcessOptions;
using konn::testsupport::run_process;
using konn::testsupport::RunResult;
using konn::testsupport::TempDir;

namespace {

enum class Egress { grpc_uds, http_connect_uds, http_connect_tcp };

constexpr const char* kToken = "konn-kube-e2e-admin-token";
constexpr size_t kBigLogSize = 16u << 20;

// $KONN_KUBE_APISERVER, else the path CMake was configured with (scripts/kube-apiserver.sh
// --path).
std::string kube_apiserver_path() {
  if (const char* p = std::getenv("KONN_KUBE_APISERVER"); p && *p) return p;
  return KONN_KUBE_APISERVER;
}

// The kube-apiserver binary, or an exception saying how to get one.
std::string require_kube_apiserver() {
  std::string kas = kube_apiserver_path();
  if (::access(kas.c_str(), X_OK) != 0) {
    throw std::runtime_error("kube-apiserver not found at " + kas +
                             ": run scripts/kube-apiserver.sh (scripts/test.sh does) or set "
                             "KONN_KUBE_APISERVER");
  }
  return kas;
}

std::string etcd_url(uint16_t port) { return "http://127.0.0.1:" + std::to_string(port); }

// A one-member etcd on loopback, its data in `dir`.
std::unique_ptr<Process> start_etcd(const konn::testsupport::TempDir& dir, uint16_t client_port,
                                    uint16_t peer_port) {
  ProcessOptions o;
  o.binary = "etcd";
  o.search_path = true;
  o.log_path = dir.file("etcd.log");
  const std::string client_url = etcd_url(client_port);
  const std::string peer_url = etcd_url(peer_port);
  o.args = {"--name=konn",
            "--data-dir=" + dir.file("etcd"),
            "--listen-client-urls=" + client_url,
            "--advertise-client-urls=" + client_url,
            "--listen-peer-urls=" + peer_url,
            "--initial-advertise-peer-urls=" + peer_url,
            "--initial-cluster=konn=" + peer_url,
            "--listen-metrics-urls=",
            "--log-level=warn",
            "--logger=zap"};
  return std::make_unique<Process>(o);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += t[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += t[(v >> 18) & 63];
    out += t[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += t[(v >> 18) & 63];
    out += t[(v >> 12) & 63];
    out += t[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// The "big" pod's log as kube-test-backend writes it.
std::string big_log() {
  std::string s;
  s.reserve(kBigLogSize + 32);
  char line[40];
  for (int i = 0; s.size() < kBigLogSize; ++i) {
    std::snprintf(line, sizeof line, "konn log line %09d\n", i);
    s += line;
  }
  s.resize(kBigLogSize);
  return s;
}

std::string tail(const std::string& s, size_t n = 6000) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// etcd, proxy-server, proxy-agent, kube-test-backend and kube-apiserver on loopback.
struct KubeStack {
  explicit KubeStack(Egress egress);

  // kubectl against the apiserver; stdout and stderr together unless `stdout_path` is given.
  RunResult kubectl(std::vector<std::string> args, std::chrono::milliseconds timeout = 60s,
                    const std::string& stdout_path = "") const;
  // kubectl create -f of `yaml` (written to a file named after `name`).
  RunResult create(const std::string& name, const std::string& yaml) const;
  // One scrape of the proxy-server's admin port.
  konn::testsupport::PromParse metrics() const;
  double tunnel_bytes_to_client() const;
  double tunnel_dials() const;
  // kube-test-backend's counters.
  nlohmann::json stats() const;
  int64_t stat(const std::string& name) const;
  // The logs of everything, for a failed check.
  std::string logs() const;

  Egress egress;
  TempDir dir{"konn-kube"};
  const konn::testsupport::TestCerts& certs;
  uint16_t etcd_port = free_tcp_port(), etcd_peer_port = free_tcp_port(),
           apiserver_port = free_tcp_port(), admin_port = free_tcp_port(),
           health_port = free_tcp_port(), agent_port = free_tcp_port(),
           frontend_port = free_tcp_port(), https_port = free_tcp_port(),
           kubelet_port = free_tcp_port(), stats_port = free_tcp_port();
  std::string uds;
  std::string kubeconfig;
  std::unique_ptr<Process> etcd, server, agent, backend, apiserver;
};

KubeStack::KubeStack(Egress e) : egress(e), certs(konn::testsupport::test_certs()) {
  uds = dir.file("konn.sock");
  const std::string kas = require_kube_apiserver();
  if (!Process::bin_exists("kube-test-backend")) {
    throw std::runtime_error(
        "kube-test-backend is not built (needs golang-go: "
        "scripts/kube-apiserver.sh installs it; then reconfigure)");
  }

  etcd = start_etcd(dir, etcd_port, etcd_peer_port);
  const std::string client_url = etcd_url(etcd_port);
  ProcessOptions o;

  o = {};
  o.binary = "proxy-server";
  o.log_path = dir.file("proxy-server.log");
  o.args = {
      "--agent-port=" + std::to_string(agent_port),  "--agent-bind-address=127.0.0.1",
      "--cluster-cert=" + certs.server_crt,          "--cluster-key=" + certs.server_key,
      "--cluster-ca-cert=" + certs.ca_crt,           "--admin-port=" + std::to_string(admin_port),
      "--health-port=" + std::to_string(health_port)};
  switch (egress) {
    case Egress::grpc_uds:
      o.args.insert(o.args.end(), {"--mode=grpc", "--uds-name=" + uds, "--server-port=0"});
      break;
    case Egress::http_connect_uds:
      o.args.insert(o.args.end(), {"--mode=http-connect", "--uds-name=" + uds, "--server-port=0"});
      break;
    case Egress::http_connect_tcp:
      o.args.insert(o.args.end(),
                    {"--mode=http-connect", "--server-port=" + std::to_string(frontend_port),
                     "--server-bind-address=127.0.0.1", "--server-cert=" + certs.server_crt,
                     "--server-key=" + certs.server_key, "--server-ca-cert=" + certs.ca_crt});
      break;
  }
  server = std::make_unique<Process>(o);
  bool frontend_up = egress == Egress::http_connect_tcp
                         ? server->wait_for_tcp_port(frontend_port, 30s)
                         : server->wait_for_unix_socket(uds, 30s);
  if (!frontend_up || !server->wait_for_tcp_port(agent_port, 30s)) {
    throw std::runtime_error("proxy-server did not come up:\n" + server->log());
  }

  o = {};
  o.binary = "proxy-agent";
  o.log_path = dir.file("proxy-agent.log");
  o.args = {"--proxy-server-host=127.0.0.1",  "--proxy-server-port=" + std::to_string(agent_port),
            "--ca-cert=" + certs.ca_crt,      "--agent-cert=" + certs.agent_crt,
            "--agent-key=" + certs.agent_key, "--agent-id=kube-node-agent",
            "--sync-interval=100ms",          "--sync-interval-cap=1s",
            "--admin-server-port=0",          "--health-server-port=0"};
  agent = std::make_unique<Process>(o);
  if (!server->wait_for_log("agent connected agentID=kube-node-agent ", 30s)) {
    throw std::runtime_error("agent did not connect:\n" + server->log() + "\n" + agent->log());
  }

  o = {};
  o.binary = "kube-test-backend";
  o.log_path = dir.file("backend.log");
  o.args = {"serve", "--ca-cert=" + certs.ca_crt, "--ca-key=" + certs.ca_key,
            "--names=konn-backend.default.svc", "--https-port=" + std::to_string(https_port),
            "--kubelet-port=" + std::to_string(kubelet_port),
            "--stats-port=" + std::to_string(stats_port),
            // kube-apiserver's front-proxy client certificate (--proxy-client-cert-file).
            "--requestheader-allowed-names=kube-apiserver", "--webhook-delay=20ms"};
  backend = std::make_unique<Process>(o);
  if (!backend->wait_for_log("ready", 30s)) {
    throw std::runtime_error("kube-test-backend did not start:\n" + backend->log());
  }

  // Service account keys and the admin's static token.
  o = {};
  o.binary = "openssl";
  o.search_path = true;
  o.args = {"genrsa", "-out", dir.file("sa.key"), "2048"};
  if (run_process(o, 60s).exit_code != 0) throw std::runtime_error("openssl genrsa failed");
  o.args = {"rsa", "-in", dir.file("sa.key"), "-pubout", "-out", dir.file("sa.pub")};
  if (run_process(o, 30s).exit_code != 0) throw std::runtime_error("openssl rsa -pubout failed");
  write_file(dir.file("tokens.csv"),
             std::string(kToken) + ",konn-admin,konn-admin-uid,\"system:masters\"\n");

  std::string egress_yaml =
      "apiVersion: apiserver.k8s.io/v1beta1\n"
      "kind: EgressSelectorConfiguration\n"
      "egressSelections:\n"
      "- name: cluster\n"
      "  connection:\n";
  switch (egress) {
    case Egress::grpc_uds:
      egress_yaml +=
          "    proxyProtocol: GRPC\n    transport:\n      uds:\n        udsName: " + uds + "\n";
      break;
    case Egress::http_connect_uds:
      egress_yaml +=
          "    proxyProtocol: HTTPConnect\n    transport:\n      uds:\n        udsName: " + uds +
          "\n";
      break;
    case Egress::http_connect_tcp:
      egress_yaml +=
          "    proxyProtocol: HTTPConnect\n    transport:\n      tcp:\n"
          "        url: https://127.0.0.1:" +
          std::to_string(frontend_port) +
          "\n        tlsConfig:\n"
          "          caBundle: " +
          certs.ca_crt + "\n          clientCert: " + certs.client_crt +
          "\n          clientKey: " + certs.client_key + "\n";
      break;
  }
  write_file(dir.file("egress.yaml"), egress_yaml);

  if (!etcd->wait_for_tcp_port(etcd_port, 30s)) {
    throw std::runtime_error("etcd did not come up:\n" + etcd->log());
  }
  o = {};
  o.binary = kas;
  o.log_path = dir.file("kube-apiserver.log");
  o.args = {
      "--etcd-servers=" + client_url, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
      "--secure-port=" + std::to_string(apiserver_port), "--insecure-port=0",
      "--cert-dir=" + dir.file("kas-certs"), "--tls-cert-file=" + certs.server_crt,
      "--tls-private-key-file=" + certs.server_key, "--client-ca-file=" + certs.ca_crt,
      "--token-auth-file=" + dir.file("tokens.csv"), "--authorization-mode=RBAC",
      "--service-cluster-ip-range=10.96.0.0/24", "--service-account-key-file=" + dir.file("sa.pub"),
      "--service-account-signing-key-file=" + dir.file("sa.key"),
      "--service-account-issuer=https://kubernetes.default.svc",
      // No controller-manager creates the default ServiceAccount the pods would need.
      "--disable-admission-plugins=ServiceAccount",
      "--egress-selector-config-file=" + dir.file("egress.yaml"),
      "--requestheader-client-ca-file=" + certs.ca_crt,
      "--requestheader-allowed-names=kube-apiserver",
      "--requestheader-username-headers=X-Remote-User",
      "--requestheader-group-headers=X-Remote-Group",
      "--requestheader-extra-headers-prefix=X-Remote-Extra-",
      "--proxy-client-cert-file=" + certs.client_crt, "--proxy-client-key-file=" + certs.client_key,
      "--kubelet-client-certificate=" + certs.client_crt,
      "--kubelet-client-key=" + certs.client_key, "--kubelet-certificate-authority=" + certs.ca_crt,
      "--kubelet-preferred-address-types=InternalIP",
      // Loopback is no address for the `kubernetes` Service's Endpoints.
      "--endpoint-reconciler-type=none", "--profiling=false"};
  apiserver = std::make_unique<Process>(o);

  kubeconfig = dir.file("kubeconfig");
  write_file(kubeconfig,
             "apiVersion: v1\nkind: Config\nclusters:\n- name: konn\n  cluster:\n"
             "    server: https://127.0.0.1:" +
                 std::to_string(apiserver_port) + "\n    certificate-authority: " + certs.ca_crt +
                 "\nusers:\n- name: admin\n  user:\n    token: " + kToken +
                 "\ncontexts:\n- name: konn\n  context:\n    cluster: konn\n    user: admin\n"
                 "current-context: konn\n");
  // Ready once /readyz answers ok and the bootstrap controller made the default namespace.
  bool ready = eventually(
      [&] {
        if (!apiserver->running()) return true;
        auto r = kubectl({"get", "--raw", "/readyz"}, 10s);
        if (r.exit_code != 0 || !contains(r.output, "ok")) {
          ::usleep(300'000);
          return false;
        }
        return kubectl({"get", "namespace", "default", "-o", "name"}, 10s).exit_code == 0;
      },
      120s);
  if (!ready || !apiserver->running()) {
    throw std::runtime_error("kube-apiserver did not become ready:\n" + tail(apiserver->log()));
  }
}

RunResult KubeStack::kubectl(std::vector<std::string> args, std::chrono::milliseconds timeout,
                             const std::string& stdout_path) const {
  ProcessOptions o;
  o.binary = KONN_KUBECTL;
  o.search_path = true;
  o.args = {"--kubeconfig=" + kubeconfig, "--cache-dir=" + dir.file("kubectl-cache")};
  o.args.insert(o.args.end(), args.begin(), args.end());
  o.stdout_path = stdout_path;
  return run_process(o, timeout);
}

RunResult KubeStack::create(const std::string& name, const std::string& yaml) const {
  std::string path = dir.file(name + ".yaml");
  write_file(path, yaml);
  return kubectl({"create", "-f", path});
}

konn::testsupport::PromParse KubeStack::metrics() const {
  ProcessOptions o;
  o.binary = "curl";
  o.search_path = true;
  o.args = {"-sf", "-m", "5", "http://127.0.0.1:" + std::to_string(admin_port) + "/metrics"};
  return konn::testsupport::parse_prometheus_text(run_process(o, 10s).output);
}

double KubeStack::tunnel_bytes_to_client() const {
  return metrics()
      .value("konnectivity_network_proxy_server_bytes_total", {{"direction", "to_client"}})
      .value_or(-1);
}

double KubeStack::tunnel_dials() const {
  return metrics()
      .value("konnectivity_network_proxy_server_dial_duration_seconds_count")
      .value_or(-1);
}

nlohmann::json KubeStack::stats() const {
  ProcessOptions o;
  o.binary = "curl";
  o.search_path = true;
  o.stdout_path = dir.file("stats.json");
  o.args = {"-sf", "-m", "5", "http://127.0.0.1:" + std::to_string(stats_port) + "/stats"};
  run_process(o, 10s);
  return nlohmann::json::parse(read_file(o.stdout_path), nullptr, false);
}

int64_t KubeStack::stat(const std::string& name) const {
  auto j = stats();
  return j.is_object() && j.contains(name) ? j[name].get<int64_t>() : 0;
}

std::string KubeStack::logs() const {
  return "--- proxy-server:\n" + tail(server->log()) + "\n--- proxy-agent:\n" +
         tail(agent->log(), 3000) + "\n--- kube-apiserver:\n" + tail(apiserver->log()) +
         "\n--- kube-test-backend:\n" + tail(backend->log(), 3000);
}

// Bytes the proxy-server sent towards kube-apiserver while `f` ran.
template <typename F>
double tunnel_bytes_during(const KubeStack& k, F f) {
  double before = k.tunnel_bytes_to_client();
  f();
  return k.tunnel_bytes_to_client() - before;
}

std::string configmap(const std::string& name) {
  return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name +
         "\n  labels:\n    konn-test: webhook\ndata:\n  k: v\n";
}

void run_checks(KubeStack& k) {
  const std::string ca_bundle = base64(read_file(k.certs.ca_crt));
  const std::string port = std::to_string(k.https_port);
  const double dials_at_start = k.tunnel_dials();
  REQUIRE(dials_at_start >= 0);  // the admin port answers with the metric

  // The Node whose kubelet is kube-test-backend, and the pods on it.
  INFO(k.create("node",
                "apiVersion: v1\nkind: Node\nmetadata:\n  name: konn-node\nstatus:\n"
                "  addresses:\n  - type: InternalIP\n    address: 127.0.0.1\n"
                "  daemonEndpoints:\n    kubeletEndpoint:\n      Port: " +
                    std::to_string(k.kubelet_port) + "\n")
           .output);
  for (const char* pod : {"konn-pod", "big"}) {
    auto r = k.create(pod, std::string("apiVersion: v1\nkind: Pod\nmetadata:\n  name: ") + pod +
                               "\nspec:\n  nodeName: konn-node\n  containers:\n  - name: main\n"
                               "    image: konn.test/none\n");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }

  // A Service of type ExternalName (localhost) names the backend for the webhook, the conversion
  // webhook and the aggregated API: kube-apiserver dials localhost:<port> and verifies the
  // certificate for konn-backend.default.svc.
  {
    auto r = k.create("service",
                      "apiVersion: v1\nkind: Service\nmetadata:\n  name: konn-backend\n"
                      "spec:\n  type: ExternalName\n  externalName: localhost\n  ports:\n"
                      "  - port: " +
                          port + "\n");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }

  {
    INFO("validating webhooks: one through a Service, one by URL");
    auto webhook = [&](const std::string& name, const std::string& client_config) {
      return "- name: " + name + "\n  clientConfig:\n" + client_config +
             "    caBundle: " + ca_bundle +
             "\n  rules:\n  - apiGroups: [\"\"]\n    apiVersions: [v1]\n"
             "    operations: [CREATE]\n    resources: [configmaps]\n"
             "  objectSelector:\n    matchLabels:\n      konn-test: webhook\n"
             "  failurePolicy: Fail\n  sideEffects: None\n  admissionReviewVersions: [v1]\n"
             "  timeoutSeconds: 15\n";
    };
    auto r = k.create(
        "webhooks",
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n"
        "metadata:\n  name: konn-webhooks\nwebhooks:\n" +
            webhook("service.konn.test",
                    "    service:\n      namespace: default\n      name: konn-backend\n"
                    "      path: /validate/service\n      port: " +
                        port + "\n") +
            webhook("url.konn.test", "    url: https://127.0.0.1:" + port + "/validate/url\n"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);

    // The configuration takes effect once the apiserver's informer has it: retry until the
    // service webhook answers. The first call fails in the way the tunnel fails, if it does.
    RunResult denied;
    double bytes = tunnel_bytes_during(k, [&] {
      eventually(
          [&] {
            denied = k.create("deny-service", configmap("deny-service-1"));
            if (contains(denied.output, "denies")) return true;
            ::usleep(500'000);
            return false;
          },
          60s);
    });
    INFO(denied.output << "\n" << k.logs());
    REQUIRE(denied.exit_code != 0);
    REQUIRE(contains(denied.output, "konn test service webhook denies deny-service-1"));
    CHECK(bytes > 0);

    denied = {};
    bytes = tunnel_bytes_during(k, [&] { denied = k.create("deny-url", configmap("deny-url-1")); });
    INFO(denied.output);
    CHECK(denied.exit_code != 0);
    CHECK(contains(denied.output, "konn test url webhook denies deny-url-1"));
    CHECK(bytes > 0);

    int64_t service_calls = k.stat("webhook_service"), url_calls = k.stat("webhook_url");
    auto allowed = k.create("allowed", configmap("allowed-1"));
    INFO(allowed.output);
    CHECK(allowed.exit_code == 0);
    CHECK(k.stat("webhook_service") == service_calls + 1);
    CHECK(k.stat("webhook_url") == url_calls + 1);
  }

  {
    INFO("a CRD whose versions v1 and v2 are converted by a webhook");
    auto r = k.create(
        "crd",
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "metadata:\n  name: widgets.konn.test\nspec:\n  group: konn.test\n"
        "  names:\n    plural: widgets\n    singular: widget\n    kind: Widget\n"
        "  scope: Namespaced\n  versions:\n"
        "  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n"
        "        type: object\n        properties:\n          spec:\n            type: object\n"
        "            properties:\n              text: {type: string}\n"
        "  - name: v2\n    served: true\n    storage: false\n    schema:\n"
        "      openAPIV3Schema:\n        type: object\n        properties:\n"
        "          spec:\n            type: object\n            properties:\n"
        "              message: {type: string}\n"
        "  conversion:\n    strategy: Webhook\n    webhook:\n"
        "      conversionReviewVersions: [v1]\n      clientConfig:\n        caBundle: " +
            ca_bundle +
            "\n        service:\n          namespace: default\n          name: konn-backend\n"
            "          path: /convert\n          port: " +
            port + "\n");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    auto established = k.kubectl(
        {"wait", "--for=condition=Established", "crd/widgets.konn.test", "--timeout=60s"}, 70s);
    INFO(established.output);
    REQUIRE(established.exit_code == 0);

    RunResult made;
    double bytes = tunnel_bytes_during(k, [&] {
      // Stored as v1: the create in v2 is converted by the webhook. Discovery of the new
      // resource may lag the Established condition by a moment.
      eventually(
          [&] {
            made = k.create("widget",
                            "apiVersion: konn.test/v2\nkind: Widget\nmetadata:\n"
                            "  name: w1\nspec:\n  message: hello from v2\n");
            if (made.exit_code == 0) return true;
            ::usleep(500'000);
            return false;
          },
          30s);
    });
    INFO(made.output << "\n" << k.logs());
    REQUIRE(made.exit_code == 0);
    CHECK(bytes > 0);
    auto v1 = k.kubectl({"get", "widgets.v1.konn.test", "w1", "-o", "jsonpath={.spec.text}"});
    auto v2 = k.kubectl({"get", "widgets.v2.konn.test", "w1", "-o", "jsonpath={.spec.message}"});
    CHECK(v1.output == "hello from v2");
    CHECK(v2.output == "hello from v2");
    CHECK(k.stat("conversions_to_v1") >= 1);
    CHECK(k.stat("conversions_to_v2") >= 1);
  }

  {
    INFO("an aggregated API behind the front proxy's client certificate");
    double before = k.tunnel_bytes_to_client();
    auto r = k.create("apiservice",
                      "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n"
                      "  name: v1alpha1.wardle.konn.test\nspec:\n  group: wardle.konn.test\n"
                      "  version: v1alpha1\n  groupPriorityMinimum: 1000\n"
                      "  versionPriority: 15\n  caBundle: " +
                          ca_bundle +
                          "\n  service:\n    namespace: default\n    name: konn-backend\n"
                          "    port: " +
                          port + "\n");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    auto available = k.kubectl({"wait", "--for=condition=Available",
                                "apiservice/v1alpha1.wardle.konn.test", "--timeout=60s"},
                               70s);
    INFO(available.output
         << "\n"
         << k.kubectl({"get", "apiservice", "v1alpha1.wardle.konn.test", "-o", "yaml"}).output);
    CHECK(available.exit_code == 0);

    // The aggregator may route the group a moment after the condition turned Available.
    const std::string path = "/apis/wardle.konn.test/v1alpha1/namespaces/default/flunders";
    RunResult list;
    eventually(
        [&] {
          list = k.kubectl({"get", "--raw", path});
          if (list.exit_code == 0) return true;
          ::usleep(500'000);
          return false;
        },
        30s);
    INFO(list.output);
    CHECK(list.exit_code == 0);
    CHECK(contains(list.output, "\"flunder-3\""));
    // The backend saw the user the apiserver authenticated (X-Remote-User).
    CHECK(contains(list.output, "\"wardle.konn.test/requested-by\":\"konn-admin\""));

    // kubectl's own discovery and list of the aggregated resource.
    RunResult names;
    eventually(
        [&] {
          names = k.kubectl({"get", "flunders.wardle.konn.test", "-o", "name"});
          if (names.exit_code == 0) return true;
          ::usleep(500'000);
          return false;
        },
        30s);
    INFO(names.output);
    CHECK(contains(names.output, "flunder.wardle.konn.test/flunder-2"));

    auto watch = k.kubectl({"get", "--raw", path + "?watch=true&timeoutSeconds=2"}, 30s);
    INFO(watch.output);
    CHECK(watch.exit_code == 0);
    CHECK(contains(watch.output, "{\"object\":{\"apiVersion\":\"wardle.konn.test/v1alpha1\""));
    CHECK(contains(watch.output, "\"type\":\"ADDED\""));
    CHECK(contains(watch.output, "\"type\":\"MODIFIED\""));
    CHECK(k.stat("aggregated_list") >= 2);
    CHECK(k.stat("aggregated_watch") >= 1);
    CHECK(k.stat("aggregated_unauthenticated") == 0);
    CHECK(k.tunnel_bytes_to_client() > before);
  }

  {
    INFO("kubectl logs, logs -f and exec through the Node's kubelet");
    RunResult logs;
    double bytes = tunnel_bytes_during(k, [&] { logs = k.kubectl({"logs", "konn-pod"}); });
    INFO(logs.output);
    CHECK(logs.exit_code == 0);
    CHECK(contains(logs.output, "hello from the fake kubelet: default/konn-pod/main"));
    CHECK(bytes > 0);

    bytes = tunnel_bytes_during(k, [&] {
      ProcessOptions o;
      o.binary = KONN_KUBECTL;
      o.search_path = true;
      o.log_path = k.dir.file("logs-f.log");
      o.args = {"--kubeconfig=" + k.kubeconfig, "--cache-dir=" + k.dir.file("kubectl-cache"),
                "logs", "-f", "konn-pod"};
      Process follow(o);
      // Lines keep arriving while the request is open: streamed, not buffered to the end.
      CHECK(follow.wait_for_log("follow line 5 of default/konn-pod/main", 30s));
      CHECK(follow.running());
      INFO(follow.log());
    });
    CHECK(bytes > 0);
    CHECK(k.stat("kubelet_logs_follow") >= 1);

    RunResult exec;
    bytes = tunnel_bytes_during(k, [&] {
      exec = k.kubectl({"exec", "konn-pod", "--", "echo", "hello", "through", "konn"});
    });
    INFO(exec.output << "\n" << k.backend->log());
    CHECK(exec.exit_code == 0);
    CHECK(contains(exec.output, "hello through konn"));
    CHECK(bytes > 0);
    auto failing = k.kubectl({"exec", "konn-pod", "--", "false"});
    INFO(failing.output);
    CHECK(failing.exit_code != 0);
  }

  {
    INFO("a 16 MiB answer: the big pod's log");
    RunResult logs;
    double bytes = tunnel_bytes_during(k, [&] {
      logs = k.kubectl({"logs", "big"}, 120s, k.dir.file("big.log"));
    });
    INFO(logs.output);
    CHECK(logs.exit_code == 0);
    std::string got = read_file(k.dir.file("big.log"));
    CHECK(got.size() == kBigLogSize);
    CHECK((got == big_log()));
    CHECK(bytes >= double(kBigLogSize));
  }

  {
    INFO("200 concurrent creates, each through both webhooks");
    int64_t service_many = k.stat("webhook_service_many");
    ProcessOptions o;
    o.binary = "kube-test-backend";
    o.args = {"create",
              "--server=https://127.0.0.1:" + std::to_string(k.apiserver_port),
              "--token=" + std::string(kToken),
              "--ca-cert=" + k.certs.ca_crt,
              "--n=200",
              "--prefix=many-"};
    RunResult r;
    double bytes = tunnel_bytes_during(k, [&] { r = run_process(o, 180s); });
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(contains(r.output, "created 200 of 200"));
    CHECK(k.stat("webhook_service_many") - service_many == 200);
    CHECK(k.stat("webhook_url_many") == 200);  // one run per backend
    CHECK(k.stat("webhook_max_inflight") >= 2);
    CHECK(bytes > 200 * 100);
    auto listed = k.kubectl({"get", "configmaps", "-l", "konn-test=webhook", "-o", "name"});
    size_t many = 0;
    for (size_t p = 0; (p = listed.output.find("configmap/many-", p)) != std::string::npos; ++p) {
      ++many;
    }
    CHECK(many == 200);
  }

  CHECK(k.tunnel_dials() > dials_at_start);

  {
    INFO("without the agent the same requests fail: they went through konn");
    k.agent->kill(SIGKILL);
    k.agent->wait_exit(10s);
    auto r = k.create("after-agent", configmap("after-agent-1"));
    INFO(r.output);
    CHECK(r.exit_code != 0);
    auto logs = k.kubectl({"logs", "konn-pod"});
    INFO(logs.output);
    CHECK(logs.exit_code != 0);
    CHECK_FALSE(contains(logs.output, "hello from the fake kubelet"));
    auto exec = k.kubectl({"exec", "konn-pod", "--", "echo", "not", "through", "konn"});
    INFO(exec.output);
    CHECK(exec.exit_code != 0);
    CHECK_FALSE(contains(exec.output, "not through konn"));
    // Reading v2 needs the conversion webhook.
    auto v2 = k.kubectl({"get", "widgets.v2.konn.test", "w1", "-o", "jsonpath={.spec.message}"});
    INFO(v2.output);
    CHECK(v2.exit_code != 0);
    auto list =
        k.kubectl({"get", "--raw", "/apis/wardle.konn.test/v1alpha1/namespaces/default/flunders"});
    INFO(list.output);
    CHECK(list.exit_code != 0);
    CHECK_FALSE(contains(list.output, "flunder-1"));
  }
  INFO(k.logs());
  CHECK(k.server->running());
}

}  // namespace

TEST_CASE(
    "kube-apiserver egress GRPC over a unix socket: webhooks, conversion, aggregated API, "
    "logs, exec, 16 MiB, 200 creates") {
  KubeStack k(Egress::grpc_uds);
  run_checks(k);
}

TEST_CASE(
    "kube-apiserver egress HTTPConnect over a unix socket: webhooks, conversion, "
    "aggregated API, logs, exec, 16 MiB, 200 creates") {
  KubeStack k(Egress::http_connect_uds);
  run_checks(k);
}

TEST_CASE(
    "kube-apiserver egress HTTPConnect over TCP with mTLS: webhooks, conversion, "
    "aggregated API, logs, exec, 16 MiB, 200 creates") {
  KubeStack k(Egress::http_connect_tcp);
  run_checks(k);
}

namespace {

// metav1.MicroTime of now plus `ahead`, as a Lease's renewTime is written.
std::string micro_time(std::chrono::seconds ahead = 0s) {
  auto now = std::chrono::system_clock::now() + ahead;
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  time_t secs = static_cast<time_t>(us / 1000000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(us % 1000000));
  return buf;
}

// etcd and kube-apiserver (no egress), a proxy-server publishing its Lease there and an agent
// counting the Leases (--count-server-leases) through the same apiserver.
struct LeaseStack {
  LeaseStack();
  RunResult kubectl(std::vector<std::string> args) const {
    ProcessOptions o;
    o.binary = KONN_KUBECTL;
    o.search_path = true;
    o.args = {"--kubeconfig=" + kubeconfig, "--cache-dir=" + dir.file("kubectl-cache")};
    o.args.insert(o.args.end(), args.begin(), args.end());
    return run_process(o, 60s);
  }
  // One of the agent's metrics (admin /metrics, prefix konnectivity_network_proxy_agent_), -1
  // when it cannot be read.
  double agent_metric(const std::string& name,
                      const std::map<std::string, std::string>& labels = {}) const {
    ProcessOptions o;
    o.binary = "curl";
    o.search_path = true;
    o.args = {"-sf", "-m", "5",
              "http://127.0.0.1:" + std::to_string(agent_admin_port) + "/metrics"};
    return konn::testsupport::parse_prometheus_text(run_process(o, 10s).output)
        .value("konnectivity_network_proxy_agent_" + name, labels)
        .value_or(-1);
  }
  std::string logs() const {
    return "--- proxy-server:\n" + tail(server->log(), 3000) + "\n--- proxy-agent:\n" +
           tail(agent->log(), 3000) + "\n--- kube-apiserver:\n" + tail(apiserver->log(), 3000);
  }

  TempDir dir{"konn-kube-lease"};
  const konn::testsupport::TestCerts& certs = konn::testsupport::test_certs();
  uint16_t etcd_port = free_tcp_port(), etcd_peer_port = free_tcp_port(),
           apiserver_port = free_tcp_port(), agent_port = free_tcp_port(),
           agent_admin_port = free_tcp_port();
  std::string kubeconfig = dir.file("kubeconfig");
  std::unique_ptr<Process> etcd, apiserver, server, agent;
};

LeaseStack::LeaseStack() {
  const std::string kas = require_kube_apiserver();
  etcd = start_etcd(dir, etcd_port, etcd_peer_port);
  const std::string client_url = etcd_url(etcd_port);
  ProcessOptions o;

  o = {};
  o.binary = "openssl";
  o.search_path = true;
  o.args = {"genrsa", "-out", dir.file("sa.key"), "2048"};
  if (run_process(o, 60s).exit_code != 0) throw std::runtime_error("openssl genrsa failed");
  o.args = {"rsa", "-in", dir.file("sa.key"), "-pubout", "-out", dir.file("sa.pub")};
  if (run_process(o, 30s).exit_code != 0) throw std::runtime_error("openssl rsa -pubout failed");
  write_file(dir.file("tokens.csv"),
             std::string(kToken) + ",konn-admin,konn-admin-uid,\"system:masters\"\n");
  if (!etcd->wait_for_tcp_port(etcd_port, 30s)) {
    throw std::runtime_error("etcd did not come up:\n" + etcd->log());
  }
  o = {};
  o.binary = kas;
  o.log_path = dir.file("kube-apiserver.log");
  o.args = {"--etcd-servers=" + client_url,
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--secure-port=" + std::to_string(apiserver_port),
            "--insecure-port=0",
            "--cert-dir=" + dir.file("kas-certs"),
            "--tls-cert-file=" + certs.server_crt,
            "--tls-private-key-file=" + certs.server_key,
            "--client-ca-file=" + certs.ca_crt,
            "--token-auth-file=" + dir.file("tokens.csv"),
            "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--service-account-key-file=" + dir.file("sa.pub"),
            "--service-account-signing-key-file=" + dir.file("sa.key"),
            "--service-account-issuer=https://kubernetes.default.svc",
            "--endpoint-reconciler-type=none",
            "--profiling=false"};
  apiserver = std::make_unique<Process>(o);
  write_file(kubeconfig,
             "apiVersion: v1\nkind: Config\nclusters:\n- name: konn\n  cluster:\n"
             "    server: https://127.0.0.1:" +
                 std::to_string(apiserver_port) + "\n    certificate-authority: " + certs.ca_crt +
                 "\nusers:\n- name: admin\n  user:\n    token: " + kToken +
                 "\ncontexts:\n- name: konn\n  context:\n    cluster: konn\n    user: admin\n"
                 "current-context: konn\n");
  bool ready = eventually(
      [&] {
        if (!apiserver->running()) return true;
        auto r = kubectl({"get", "namespace", "kube-system", "-o", "name"});
        if (r.exit_code == 0) return true;
        ::usleep(300'000);
        return false;
      },
      120s);
  if (!ready || !apiserver->running()) {
    throw std::runtime_error("kube-apiserver did not become ready:\n" + tail(apiserver->log()));
  }

  o = {};
  o.binary = "proxy-server";
  o.log_path = dir.file("proxy-server.log");
  o.args = {"--agent-port=" + std::to_string(agent_port),
            "--agent-bind-address=127.0.0.1",
            "--cluster-cert=" + certs.server_crt,
            "--cluster-key=" + certs.server_key,
            "--cluster-ca-cert=" + certs.ca_crt,
            "--mode=grpc",
            "--uds-name=" + dir.file("konn.sock"),
            "--server-port=0",
            "--admin-port=" + std::to_string(free_tcp_port()),
            "--health-port=" + std::to_string(free_tcp_port()),
            "--server-count=1",
            "--enable-lease-controller",
            "--kubeconfig=" + kubeconfig};
  server = std::make_unique<Process>(o);
  if (!server->wait_for_tcp_port(agent_port, 30s)) {
    throw std::runtime_error("proxy-server did not come up:\n" + server->log());
  }
  o = {};
  o.binary = "proxy-agent";
  o.log_path = dir.file("proxy-agent.log");
  o.args = {"--proxy-server-host=127.0.0.1",
            "--proxy-server-port=" + std::to_string(agent_port),
            "--ca-cert=" + certs.ca_crt,
            "--agent-cert=" + certs.agent_crt,
            "--agent-key=" + certs.agent_key,
            "--agent-id=lease-agent",
            "--admin-server-port=" + std::to_string(agent_admin_port),
            "--health-server-port=0",
            "--count-server-leases",
            "--kubeconfig=" + kubeconfig};
  agent = std::make_unique<Process>(o);
}

}  // namespace

TEST_CASE("kube-apiserver: a Lease created there changes the agent's server count within 2 s") {
  LeaseStack k;
  // The server's own Lease: one server.
  REQUIRE(eventually([&] { return k.agent_metric("known_server_count") == 1; }, 30s));
  INFO(k.logs());
  const std::string yaml =
      "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n"
      "  name: konnectivity-proxy-server-other\n  namespace: kube-system\n"
      "  labels:\n    k8s-app: konnectivity-server\nspec:\n  holderIdentity: other\n"
      "  leaseDurationSeconds: 3600\n  renewTime: \"" +
      micro_time() + "\"\n";
  write_file(k.dir.file("lease.yaml"), yaml);
  auto made = k.kubectl({"create", "-f", k.dir.file("lease.yaml")});
  auto created = std::chrono::steady_clock::now();
  INFO(made.output);
  REQUIRE(made.exit_code == 0);
  REQUIRE(eventually([&] { return k.agent_metric("known_server_count") == 2; }, 15s));
  auto took = std::chrono::steady_clock::now() - created;
  INFO("seen after " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                     << " ms");
  CHECK(took < 2s);
  // Deleted: gone from the count as fast.
  auto gone =
      k.kubectl({"delete", "lease", "-n", "kube-system", "konnectivity-proxy-server-other"});
  INFO(gone.output);
  REQUIRE(gone.exit_code == 0);
  auto deleted = std::chrono::steady_clock::now();
  REQUIRE(eventually([&] { return k.agent_metric("known_server_count") == 1; }, 15s));
  CHECK(std::chrono::steady_clock::now() - deleted < 2s);
  // One list, then the watch: the apiserver answered both.
  CHECK(k.agent_metric("lease_lists_total", {{"http_response_code", "200"}, {"reason", ""}}) == 1);
  CHECK(k.agent_metric("lease_watches_total", {{"http_response_code", "200"}, {"reason", ""}}) ==
        1);
  CHECK(k.agent->running());
}
