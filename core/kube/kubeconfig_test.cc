#include "core/kube/kubeconfig.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <catch2/catch.hpp>

using namespace konn::core::kube;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/kubeconfig-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    fs::create_directories((path / name).parent_path());
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

KubeconfigEnvironment no_env() {
  KubeconfigEnvironment e;
  e.kubeconfig_env = "";
  e.home = "/nonexistent";
  return e;
}

std::string error_of(const KubeconfigOverrides& o, const KubeconfigEnvironment& e) {
  try {
    load_rest_config(o, e);
  } catch (const KubeconfigError& ex) {
    return ex.what();
  }
  return "";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A kubeconfig whose user runs ./plugin.sh (the script given) with `api_version`.
RestConfig exec_config(const TempDir& d, const std::string& script,
                       const std::string& api_version = "client.authentication.k8s.io/v1") {
  std::string plugin = d.write("plugin.sh", "#!/bin/sh\n" + script);
  fs::permissions(plugin, fs::perms::owner_all);
  std::string cfg = d.write("config",
                            "clusters: [{name: c, cluster: {server: \"https://h:1\"}}]\n"
                            "users: [{name: u, user: {exec: {apiVersion: " +
                                api_version +
                                ", command: ./plugin.sh}}}]\n"
                                "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                                "current-context: x\n");
  KubeconfigOverrides o;
  o.kubeconfig = cfg;
  return load_rest_config(o, no_env());
}

// Shell lines printing an ExecCredential whose status is `status` (JSON, no single quotes).
std::string print_credential(const std::string& status,
                             const std::string& api_version = "client.authentication.k8s.io/v1") {
  return "echo '{\"apiVersion\":\"" + api_version +
         "\",\"kind\":\"ExecCredential\",\"status\":" + status + "}'\n";
}

size_t lines_in(const std::string& path) {
  std::string all = slurp(path);
  return static_cast<size_t>(std::count(all.begin(), all.end(), '\n'));
}

}  // namespace

TEST_CASE("base64 decoding", "[kubeconfig]") {
  CHECK(decode_base64("aGVsbG8=") == std::optional<std::string>("hello"));
  CHECK(decode_base64("aGVs\nbG8h") == std::optional<std::string>("hello!"));
  CHECK_FALSE(decode_base64("a*b"));
}

TEST_CASE("relative paths resolve against the file, data fields decode", "[kubeconfig]") {
  TempDir d;
  d.write("sub/ca.crt", "CA-PEM");
  d.write("sub/token", "tok-from-file\n");
  std::string cfg = d.write("sub/config", R"(
clusters:
- name: c
  cluster:
    server: https://10.1.2.3:6443/k8s/clusters/c-1
    certificate-authority: ca.crt
    tls-server-name: api.internal
users:
- name: u
  user:
    tokenFile: token
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
)");
  KubeconfigOverrides o;
  o.kubeconfig = cfg;
  auto rc = load_rest_config(o, no_env());
  CHECK(rc.ca_pem == "CA-PEM");
  CHECK(rc.token == "tok-from-file");
  CHECK(rc.token_file == (d.path / "sub/token").string());
  CHECK(rc.client_cert_pem == "CERT");
  CHECK(rc.client_key_pem == "KEY");
  CHECK(rc.host == "10.1.2.3");
  CHECK(rc.port == 6443);
  CHECK(rc.path == "/k8s/clusters/c-1");
  CHECK(rc.tls_server_name == "api.internal");
  CHECK(rc.host_header() == "10.1.2.3:6443");
}

TEST_CASE("KUBECONFIG merge: first definition and first current-context win", "[kubeconfig]") {
  TempDir d;
  std::string a = d.write("a", R"(
current-context: first
clusters:
- {name: shared, cluster: {server: "https://a:1"}}
contexts:
- {name: first, context: {cluster: shared, user: ua}}
users:
- {name: ua, user: {token: token-a}}
)");
  std::string b = d.write("b", R"(
current-context: second
clusters:
- {name: shared, cluster: {server: "https://b:2"}}
- {name: only-b, cluster: {server: "https://onlyb:3"}}
contexts:
- {name: second, context: {cluster: only-b, user: ub}}
users:
- {name: ub, user: {username: bob, password: pw}}
)");
  auto env = no_env();
  env.kubeconfig_env = a + ":" + d.path.string() + "/missing:" + b;
  auto rc = load_rest_config({}, env);
  CHECK(rc.server == "https://a:1");
  CHECK(rc.token == "token-a");

  KubeconfigOverrides o;
  o.context = "second";
  rc = load_rest_config(o, env);
  CHECK(rc.server == "https://onlyb:3");
  CHECK(rc.username == "bob");
  CredentialSource creds(rc);
  CHECK(creds.current().authorization == "Basic Ym9iOnB3");

  o.context.clear();
  o.cluster = "only-b";
  o.server = "http://override:8080";
  o.token = "flag-token";
  o.as = "jane";
  o.as_groups = {"g1"};
  rc = load_rest_config(o, env);
  CHECK(rc.scheme == "http");
  CHECK(rc.port == 8080);
  CHECK(rc.token == "flag-token");
  CHECK(rc.impersonate_user == "jane");
}

TEST_CASE("errors name the file and the field", "[kubeconfig]") {
  TempDir d;
  KubeconfigOverrides o;
  o.kubeconfig = (d.path / "absent").string();
  CHECK_THAT(error_of(o, no_env()), Catch::Contains("absent") && Catch::Contains("No such file"));

  o.kubeconfig = d.write("bad-yaml", "clusters: [\n  - {name: x\n");
  CHECK_THAT(error_of(o, no_env()), Catch::Contains("bad-yaml") && Catch::Contains("line"));

  o.kubeconfig = d.write("missing-cert", R"(
clusters: [{name: c, cluster: {server: "https://h:1"}}]
users: [{name: u, user: {client-certificate: nope.crt, client-key: nope.key}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
)");
  std::string e = error_of(o, no_env());
  CHECK_THAT(e, Catch::Contains("missing-cert") &&
                    Catch::Contains("users[\"u\"].user.client-certificate") &&
                    Catch::Contains("nope.crt"));

  o.kubeconfig = d.write("bad-data", R"(
clusters: [{name: c, cluster: {server: "https://h:1", certificate-authority-data: "!!"}}]
contexts: [{name: x, context: {cluster: c}}]
current-context: x
)");
  CHECK_THAT(error_of(o, no_env()),
             Catch::Contains("clusters[\"c\"].cluster.certificate-authority-data"));

  o.kubeconfig = d.write("no-context", "current-context: gone\n");
  CHECK_THAT(error_of(o, no_env()), Catch::Contains("context \"gone\" does not exist"));

  CHECK_THAT(error_of({}, no_env()), Catch::Contains("no configuration has been provided"));
}

TEST_CASE("in-cluster fallback uses the service account", "[kubeconfig]") {
  TempDir d;
  d.write("sa/token", "sa-token\n");
  d.write("sa/ca.crt", "SA-CA");
  auto env = no_env();
  env.service_host = "10.96.0.1";
  env.service_port = "443";
  env.service_account_dir = (d.path / "sa").string();
  auto rc = load_rest_config({}, env);
  CHECK(rc.server == "https://10.96.0.1:443");
  CHECK(rc.token == "sa-token");
  CHECK(rc.ca_pem == "SA-CA");
  CHECK(rc.source == "in-cluster service account");
}

TEST_CASE("exec credential plugin output is used and cached", "[kubeconfig]") {
  TempDir d;
  std::string counter = (d.path / "count").string();
  std::string plugin =
      d.write("plugin.sh", "#!/bin/sh\necho x >> " + counter +
                               "\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
                               "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"exec-tok\","
                               "\"expirationTimestamp\":\"2099-01-01T00:00:00Z\"}}'\n");
  fs::permissions(plugin, fs::perms::owner_all);
  std::string cfg = d.write("config", R"(
clusters: [{name: c, cluster: {server: "https://h:1"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: ./plugin.sh}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
)");
  KubeconfigOverrides o;
  o.kubeconfig = cfg;
  auto rc = load_rest_config(o, no_env());
  REQUIRE(rc.exec);
  CHECK(rc.exec->command == plugin);
  CredentialSource creds(rc);
  CHECK(creds.current().authorization == "Bearer exec-tok");
  CHECK(creds.current().authorization == "Bearer exec-tok");
  std::ifstream in(counter);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(all == "x\n");  // ran once, then cached until expiry
}

namespace {

// Runs an exec plugin that first runs `command` (a shell line), then prints token "t"; returns
// the Authorization the credential source got from it.
std::string run_token_plugin(TempDir& d, const std::string& command) {
  std::string plugin =
      d.write("plugin.sh", "#!/bin/sh\n" + command +
                               "\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
                               "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}'\n");
  fs::permissions(plugin, fs::perms::owner_all);
  std::string cfg = d.write("config", R"(
clusters: [{name: c, cluster: {server: "https://h:1"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: ./plugin.sh}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
)");
  KubeconfigOverrides o;
  o.kubeconfig = cfg;
  auto rc = load_rest_config(o, no_env());  // CredentialSource keeps a reference to it
  CredentialSource creds(rc);
  return creds.current().authorization;
}

}  // namespace

TEST_CASE("an exec plugin inherits no descriptor beyond stdin, stdout and stderr", "[kubeconfig]") {
  TempDir d;
  // A socket without O_CLOEXEC, as Asio opens them, is open while the plugin runs.
  int leaky = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(leaky >= 0);
  std::string seen = (d.path / "fds").string();
  CHECK(run_token_plugin(d, "ls /proc/$$/fd > " + seen) == "Bearer t");
  ::close(leaky);
  std::ifstream in(seen);
  std::set<std::string> fds;
  for (std::string fd; in >> fd;) fds.insert(fd);
  // 0-2, plus the descriptor the shell itself holds open on its script (numbered above 9 by
  // dash); never the socket.
  CHECK(fds.count(std::to_string(leaky)) == 0);
  for (const auto& fd : fds) {
    int n = std::stoi(fd);
    CHECK((n <= 2 || n >= 10));
  }
}

TEST_CASE("an exec plugin starts with SIGPIPE at its default though the daemon ignores it",
          "[kubeconfig]") {
  TempDir d;
  auto previous = std::signal(SIGPIPE, SIG_IGN);  // as every daemon's main() does
  std::string seen = (d.path / "sigign").string();
  CHECK(run_token_plugin(d, "grep SigIgn /proc/$$/status > " + seen) == "Bearer t");
  std::signal(SIGPIPE, previous);
  std::ifstream in(seen);
  std::string label, mask;
  in >> label >> mask;
  REQUIRE(label == "SigIgn:");
  unsigned long long ignored = std::stoull(mask, nullptr, 16);
  CHECK((ignored & (1ULL << (SIGPIPE - 1))) == 0);
}

TEST_CASE("base64 encodes with padding and round-trips through decode", "[kubeconfig]") {
  CHECK(encode_base64("") == "");
  CHECK(encode_base64("f") == "Zg==");
  CHECK(encode_base64("fo") == "Zm8=");
  CHECK(encode_base64("foo") == "Zm9v");
  CHECK(encode_base64("user:pass") == "dXNlcjpwYXNz");
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  CHECK(decode_base64(encode_base64(all)) == all);
}

TEST_CASE("exec plugin: KUBERNETES_EXEC_INFO carries the configured apiVersion", "[kubeconfig]") {
  TempDir d;
  std::string info = (d.path / "info").string();
  auto rc = exec_config(
      d,
      "printf '%s' \"$KUBERNETES_EXEC_INFO\" > " + info + "\n" +
          print_credential("{\"token\":\"beta\"}", "client.authentication.k8s.io/v1beta1"),
      "client.authentication.k8s.io/v1beta1");
  CredentialSource creds(rc);
  auto c = creds.current();
  CHECK(c.error == "");
  CHECK(c.authorization == "Bearer beta");
  CHECK(slurp(info) ==
        "{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\","
        "\"spec\":{\"interactive\":false}}");
}

TEST_CASE("exec plugin: unknown apiVersion refused at load, mismatched output refused",
          "[kubeconfig]") {
  TempDir d;
  CHECK_THROWS_WITH(exec_config(d, "true\n", "client.authentication.k8s.io/v1alpha1"),
                    Catch::Contains("users[\"u\"].user.exec.apiVersion") &&
                        Catch::Contains("invalid apiVersion"));
  auto rc =
      exec_config(d, print_credential("{\"token\":\"t\"}", "client.authentication.k8s.io/v1beta1"));
  CredentialSource creds(rc);
  CHECK_THAT(creds.current().error,
             Catch::Contains("configured to use API version client.authentication.k8s.io/v1,") &&
                 Catch::Contains("plugin returned version client.authentication.k8s.io/v1beta1"));
}

TEST_CASE("exec plugin that hangs is killed with its children after the timeout", "[kubeconfig]") {
  TempDir d;
  std::string pidfile = (d.path / "child.pid").string();
  auto rc = exec_config(d, "sleep 30 &\necho $! > " + pidfile + "\nwait\n");
  CredentialSource creds(rc, std::chrono::milliseconds(300));
  auto start = std::chrono::steady_clock::now();
  auto c = creds.current();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  CHECK_THAT(c.error, Catch::Contains("did not finish within 300ms and was killed"));
  CHECK(c.authorization.empty());
  // The grandchild (sleep) was in the plugin's process group: gone too.
  pid_t child = std::stoi(slurp(pidfile));
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = ::kill(child, 0) != 0 && errno == ESRCH;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(gone);
}

TEST_CASE("exec plugin failure: exit code and stderr reported, not cached", "[kubeconfig]") {
  TempDir d;
  std::string count = (d.path / "count").string();
  auto rc = exec_config(d, "echo x >> " + count + "\necho 'no credentials for you' >&2\nexit 3\n");
  CredentialSource creds(rc);
  auto c = creds.current();
  CHECK_THAT(c.error, Catch::Contains("failed with exit code 3") &&
                          Catch::Contains("no credentials for you") &&
                          Catch::Contains("plugin.sh"));
  CHECK_FALSE(creds.cached());
  CHECK_FALSE(creds.current().error.empty());
  CHECK(lines_in(count) == 2);
}

TEST_CASE("exec plugin: concurrent callers wait for one run", "[kubeconfig]") {
  TempDir d;
  std::string count = (d.path / "count").string();
  auto rc = exec_config(
      d, "echo x >> " + count + "\nsleep 0.5\n" + print_credential("{\"token\":\"shared\"}"));
  CredentialSource creds(rc);
  CHECK_FALSE(creds.cached());
  std::atomic<int> answered{0};
  std::atomic<int> good{0};
  for (int i = 0; i < 8; ++i) {
    creds.fetch([&](CredentialSource::Credential c) {
      if (c.authorization == "Bearer shared") ++good;
      ++answered;
    });
  }
  for (int i = 0; i < 500 && answered.load() < 8; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(answered.load() == 8);
  CHECK(good.load() == 8);
  CHECK(lines_in(count) == 1);
  REQUIRE(creds.cached());
  CHECK(creds.cached()->authorization == "Bearer shared");
}

TEST_CASE("exec plugin: client certificate output, and expiry causes a re-run", "[kubeconfig]") {
  TempDir d;
  std::string count = (d.path / "count").string();
  SECTION("certificate and key") {
    auto rc = exec_config(d, "echo x >> " + count + "\n" +
                                 print_credential("{\"clientCertificateData\":\"CERT\","
                                                  "\"clientKeyData\":\"KEY\"}"));
    CredentialSource creds(rc);
    auto c = creds.current();
    CHECK(c.error == "");
    CHECK(c.authorization == "");
    CHECK(c.client_cert_pem == "CERT");
    CHECK(c.client_key_pem == "KEY");
    REQUIRE(creds.last_exec());
    CHECK(creds.last_exec()->client_cert_pem == "CERT");
  }
  SECTION("only a certificate is an error") {
    auto rc = exec_config(d, print_credential("{\"clientCertificateData\":\"CERT\"}"));
    CredentialSource creds(rc);
    CHECK_THAT(creds.current().error, Catch::Contains("only certificate or key"));
  }
  SECTION("expired at once: every call runs it") {
    auto rc = exec_config(d, "echo x >> " + count + "\n" +
                                 print_credential("{\"token\":\"old\",\"expirationTimestamp\":"
                                                  "\"2001-01-01T00:00:00Z\"}"));
    CredentialSource creds(rc);
    CHECK(creds.current().authorization == "Bearer old");
    CHECK(creds.current().authorization == "Bearer old");
    CHECK(lines_in(count) == 2);
  }
  SECTION("expiring soon: cached until then") {
    auto rc = exec_config(
        d, "echo x >> " + count +
               "\nexp=$(date -u -d \"@$(( $(date +%s) + 2 ))\" +%Y-%m-%dT%H:%M:%SZ)\n"
               "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":"
               "\"ExecCredential\",\"status\":{\"token\":\"soon\",\"expirationTimestamp\":\"'"
               "$exp'\"}}'\n");
    CredentialSource creds(rc);
    CHECK(creds.current().authorization == "Bearer soon");
    CHECK(creds.current().authorization == "Bearer soon");
    CHECK(lines_in(count) == 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    CHECK_FALSE(creds.cached());
    CHECK(creds.current().authorization == "Bearer soon");
    CHECK(lines_in(count) == 2);
  }
}

TEST_CASE("exec plugin: the kubeconfig's env wins over the process's", "[kubeconfig]") {
  TempDir d;
  ::setenv("KONN_EXEC_TEST_VAR", "from-process", 1);
  std::string seen = (d.path / "seen").string();
  std::string plugin =
      d.write("plugin.sh", "#!/bin/sh\nprintf '%s' \"$KONN_EXEC_TEST_VAR\" > " + seen + "\n" +
                               print_credential("{\"token\":\"t\"}"));
  fs::permissions(plugin, fs::perms::owner_all);
  std::string cfg = d.write("config", R"(
clusters: [{name: c, cluster: {server: "https://h:1"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: ./plugin.sh,
  env: [{name: KONN_EXEC_TEST_VAR, value: from-kubeconfig}]}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
)");
  KubeconfigOverrides o;
  o.kubeconfig = cfg;
  auto rc = load_rest_config(o, no_env());
  CredentialSource creds(rc);
  CHECK(creds.current().authorization == "Bearer t");
  ::unsetenv("KONN_EXEC_TEST_VAR");
  CHECK(slurp(seen) == "from-kubeconfig");
}
