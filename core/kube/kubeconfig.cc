#include "core/kube/kubeconfig.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <future>
#include <poll.h>
#include <spawn.h>
#include <sstream>
#include <string_view>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "core/kube/lease.h"
#include "core/net/endpoint.h"

extern char** environ;

namespace konn::core::kube {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string dq(const std::string& s) { return "\"" + s + "\""; }

// One named entry (cluster, user or context) and the file it came from.
struct Entry {
  YAML::Node node;
  std::string file;
  std::string field;  // e.g. users["alice"].user
};

struct Merged {
  std::map<std::string, Entry> clusters, users, contexts;
  std::string current_context;
  std::vector<std::string> files;  // files actually loaded
};

std::string scalar(const YAML::Node& n, const char* key, const Entry& e) {
  YAML::Node v = n[key];
  if (!v || v.IsNull()) return "";
  if (!v.IsScalar()) {
    throw KubeconfigError("kubeconfig " + dq(e.file) + ": " + e.field + "." + key +
                          ": expected a string");
  }
  return v.as<std::string>();
}

bool boolean(const YAML::Node& n, const char* key, const Entry& e) {
  std::string s = scalar(n, key, e);
  if (s.empty() || s == "false") return false;
  if (s == "true") return true;
  throw KubeconfigError("kubeconfig " + dq(e.file) + ": " + e.field + "." + key +
                        ": expected true or false, got " + dq(s));
}

// Resolves `path` against the directory of the kubeconfig that named it.
std::string resolve(const std::string& path, const std::string& file) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (fs::path(file).parent_path() / path).lexically_normal().string();
}

// Reads the PEM named by `<key>` (a path) or `<key>-data` (base64) in `n`.
std::string pem_field(const YAML::Node& n, const std::string& key, const Entry& e) {
  std::string data = scalar(n, (key + "-data").c_str(), e);
  if (!data.empty()) {
    auto decoded = decode_base64(data);
    if (!decoded) {
      throw KubeconfigError("kubeconfig " + dq(e.file) + ": " + e.field + "." + key +
                            "-data: illegal base64 data");
    }
    return *decoded;
  }
  std::string path = scalar(n, key.c_str(), e);
  if (path.empty()) return "";
  try {
    return read_file(resolve(path, e.file));
  } catch (const std::exception& ex) {
    throw KubeconfigError("kubeconfig " + dq(e.file) + ": " + e.field + "." + key + ": " +
                          ex.what());
  }
}

void merge_file(const std::string& file, Merged& m) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::BadFile&) {
    throw KubeconfigError("error loading kubeconfig " + dq(file) + ": open " + file + ": " +
                          std::strerror(errno ? errno : ENOENT));
  } catch (const YAML::Exception& e) {
    throw KubeconfigError("error loading kubeconfig " + dq(file) + ": yaml: line " +
                          std::to_string(e.mark.line + 1) + ", column " +
                          std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  m.files.push_back(file);
  if (root.IsNull()) return;
  if (!root.IsMap()) {
    throw KubeconfigError("error loading kubeconfig " + dq(file) + ": not a YAML mapping");
  }
  auto list = [&](const char* key, const char* inner, std::map<std::string, Entry>& into) {
    YAML::Node seq = root[key];
    if (!seq || seq.IsNull()) return;
    if (!seq.IsSequence()) {
      throw KubeconfigError("kubeconfig " + dq(file) + ": " + key + ": expected a list");
    }
    for (size_t i = 0; i < seq.size(); ++i) {
      YAML::Node item = seq[i];
      std::string where = std::string(key) + "[" + std::to_string(i) + "]";
      if (!item.IsMap() || !item["name"] || !item["name"].IsScalar()) {
        throw KubeconfigError("kubeconfig " + dq(file) + ": " + where +
                              ".name: missing or not a string");
      }
      std::string name = item["name"].as<std::string>();
      YAML::Node body = item[inner];
      if (body && !body.IsNull() && !body.IsMap()) {
        throw KubeconfigError("kubeconfig " + dq(file) + ": " + key + "[" + dq(name) + "]." +
                              inner + ": expected a mapping");
      }
      // First file to define a name wins (kubectl's merge rule).
      into.emplace(name, Entry{body ? body : YAML::Node(YAML::NodeType::Map), file,
                               std::string(key) + "[" + dq(name) + "]." + inner});
    }
  };
  list("clusters", "cluster", m.clusters);
  list("users", "user", m.users);
  list("contexts", "context", m.contexts);
  if (m.current_context.empty() && root["current-context"] && root["current-context"].IsScalar()) {
    m.current_context = root["current-context"].as<std::string>();
  }
}

void parse_server(RestConfig& rc, const std::string& origin) {
  std::string url = rc.server;
  size_t sep = url.find("://");
  if (sep == std::string::npos) {
    rc.scheme = "https";
  } else {
    rc.scheme = url.substr(0, sep);
    url = url.substr(sep + 3);
  }
  if (rc.scheme != "https" && rc.scheme != "http") {
    throw KubeconfigError(origin + ": server " + dq(rc.server) + ": unsupported scheme " +
                          dq(rc.scheme));
  }
  size_t slash = url.find('/');
  std::string authority = url.substr(0, slash);
  rc.path = slash == std::string::npos ? "" : url.substr(slash);
  while (!rc.path.empty() && rc.path.back() == '/') rc.path.pop_back();
  uint16_t default_port = rc.scheme == "https" ? 443 : 80;
  auto hp = core::net::parse_host_port(authority);
  if (hp) {
    rc.host = hp->host;
    rc.port = hp->port;
  } else if (!authority.empty() && authority.find(':') == std::string::npos) {
    rc.host = authority;
    rc.port = default_port;
  } else if (authority.size() > 2 && authority.front() == '[' && authority.back() == ']') {
    rc.host = authority.substr(1, authority.size() - 2);
    rc.port = default_port;
  } else {
    throw KubeconfigError(origin + ": server " + dq(rc.server) + ": invalid host");
  }
  if (rc.host.empty()) {
    throw KubeconfigError(origin + ": server " + dq(rc.server) + ": no host");
  }
}

constexpr const char* kExecV1 = "client.authentication.k8s.io/v1";
constexpr const char* kExecV1beta1 = "client.authentication.k8s.io/v1beta1";
// Plugin output we keep: an ExecCredential is a few KiB; more is a broken plugin.
constexpr size_t kMaxExecStdout = 1 << 20;
constexpr size_t kMaxExecStderr = 1024;  // quoted in the error; the rest is read and dropped

// A string member of a JSON object, "" when absent or not a string.
std::string json_string(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

struct ExecOutput {
  std::string token;
  std::string cert_pem;
  std::string key_pem;
  std::optional<std::time_t> expiry;
  std::string error;  // "" on success
};

// Closes its descriptors on scope exit.
struct Fds {
  std::vector<int> fds;
  ~Fds() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
};

// Runs the plugin as client-go does (args, env added to ours, KUBERNETES_EXEC_INFO naming the
// configured apiVersion, interactive false), in its own process group so that a timeout kills
// whatever it started too (a shell script's children hold the pipes open otherwise). Blocking:
// called on CredentialSource's runner thread only.
ExecOutput run_exec_plugin(const ExecConfig& x, std::chrono::milliseconds timeout,
                           const std::atomic<bool>& stopping) {
  using Clock = std::chrono::steady_clock;
  ExecOutput r;
  const std::string who = "exec: executable " + x.command;
  int out_pipe[2];
  int err_pipe[2];
  // O_CLOEXEC: other threads may spawn processes too, and must not inherit our pipe ends.
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    r.error = who + ": pipe: " + std::strerror(errno);
    return r;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    r.error = who + ": pipe: " + std::strerror(errno);
    close(out_pipe[0]);
    close(out_pipe[1]);
    return r;
  }
  Fds read_ends{{out_pipe[0], err_pipe[0]}};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // Not interactive: no terminal, stdin is /dev/null.
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  // Nothing beyond 0-2: Asio opens sockets without O_CLOEXEC, so the plugin would otherwise
  // inherit the listener and every client and apiserver connection (and hold them open).
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The daemons ignore SIGPIPE (core::io::ignore_broken_pipe_signal), and an ignored signal
  // would stay ignored in the plugin: it starts with the default, as from a shell.
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> argv_s{x.command};
  argv_s.insert(argv_s.end(), x.args.begin(), x.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Ours plus the kubeconfig's, which win (as in Go, where the last duplicate counts; getenv
  // would take the first, so duplicates are dropped here).
  auto overridden = [&x](std::string_view kv) {
    std::string_view key = kv.substr(0, kv.find('='));
    if (key == "KUBERNETES_EXEC_INFO") return true;
    return std::any_of(x.env.begin(), x.env.end(), [key](const auto& e) { return e.first == key; });
  };
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!overridden(*e)) env_s.emplace_back(*e);
  }
  for (const auto& [k, v] : x.env) env_s.push_back(k + "=" + v);
  nlohmann::json info = {{"apiVersion", x.api_version},
                         {"kind", "ExecCredential"},
                         {"spec", {{"interactive", false}}}};
  env_s.push_back("KUBERNETES_EXEC_INFO=" + info.dump());
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, x.command.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    r.error = rc == ENOENT ? who + " not found" : who + ": " + std::strerror(rc);
    return r;
  }

  auto deadline = Clock::now() + timeout;
  std::string out;
  std::string err;
  bool out_open = true;
  bool err_open = true;
  bool timed_out = false;
  bool too_big = false;
  char buf[16 * 1024];
  auto wait_slice = [&]() -> int {
    // Short slices so that shutdown (stopping) is noticed within 100 ms.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 100));
  };
  while ((out_open || err_open) && !stopping.load()) {
    if (Clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    pollfd p[2] = {{out_open ? out_pipe[0] : -1, POLLIN, 0},
                   {err_open ? err_pipe[0] : -1, POLLIN, 0}};
    int n = poll(p, 2, wait_slice());
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2 && n > 0; ++i) {
      if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      ssize_t got = read(p[i].fd, buf, sizeof buf);
      if (got <= 0) {
        (i == 0 ? out_open : err_open) = false;
        continue;
      }
      if (i == 0) {
        out.append(buf, static_cast<size_t>(got));
      } else if (err.size() < kMaxExecStderr) {
        err.append(buf, std::min(static_cast<size_t>(got), kMaxExecStderr - err.size()));
      }
    }
    if (out.size() > kMaxExecStdout) {
      too_big = true;
      break;
    }
  }
  // Both pipes closed: the plugin is exiting (or daemonised without them; the deadline holds).
  int status = 0;
  bool exited = false;
  while (!timed_out && !too_big && !stopping.load()) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) {
      exited = w == pid;
      break;
    }
    if (Clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    poll(nullptr, 0, std::min(wait_slice(), 10));
  }
  if (!exited) {
    kill(-pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
  std::string said = err.empty() ? "" : " (stderr: " + err + ")";
  if (stopping.load() && !exited) {
    r.error = who + ": stopped (shutting down)";
    return r;
  }
  if (timed_out) {
    r.error = who + " did not finish within " + std::to_string(timeout.count()) +
              "ms and was killed" + said;
    return r;
  }
  if (too_big) {
    r.error = who + ": more than " + std::to_string(kMaxExecStdout) + " bytes of output";
    return r;
  }
  if (!WIFEXITED(status)) {
    r.error = who + " killed by signal " + std::to_string(WTERMSIG(status)) + said;
    return r;
  }
  if (WEXITSTATUS(status) != 0) {
    r.error = who + " failed with exit code " + std::to_string(WEXITSTATUS(status)) + said;
    return r;
  }
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    r.error = "exec: decoding stdout of " + x.command + ": not a JSON object";
    return r;
  }
  std::string api = json_string(j, "apiVersion");
  if (api != x.api_version) {
    r.error = "exec plugin is configured to use API version " + x.api_version +
              ", plugin returned version " + (api.empty() ? "(none)" : api);
    return r;
  }
  if (json_string(j, "kind") != "ExecCredential") {
    r.error = "exec: decoding stdout of " + x.command + ": kind is not ExecCredential";
    return r;
  }
  auto st = j.find("status");
  if (st == j.end() || !st->is_object()) {
    r.error = "exec plugin didn't return a status field";
    return r;
  }
  r.token = json_string(*st, "token");
  r.cert_pem = json_string(*st, "clientCertificateData");
  r.key_pem = json_string(*st, "clientKeyData");
  if (r.cert_pem.empty() != r.key_pem.empty()) {
    r.error = "exec plugin returned only certificate or key, not both";
    return r;
  }
  if (r.token.empty() && r.cert_pem.empty()) {
    r.error = "exec plugin didn't return a token or cert/key pair";
    return r;
  }
  if (auto expiry = parse_rfc3339(json_string(*st, "expirationTimestamp"))) {
    r.expiry = std::chrono::system_clock::to_time_t(*expiry);
  }
  return r;
}

}  // namespace

std::string encode_base64(const std::string& raw) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < raw.size(); i += 3) {
    uint32_t v = (static_cast<uint8_t>(raw[i]) << 16) | (static_cast<uint8_t>(raw[i + 1]) << 8) |
                 static_cast<uint8_t>(raw[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(k[(v >> s) & 63]);
  }
  if (i < raw.size()) {
    uint32_t v = static_cast<uint8_t>(raw[i]) << 16;
    if (i + 1 < raw.size()) v |= static_cast<uint8_t>(raw[i + 1]) << 8;
    out.push_back(k[(v >> 18) & 63]);
    out.push_back(k[(v >> 12) & 63]);
    out.push_back(i + 1 < raw.size() ? k[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::optional<std::string> decode_base64(const std::string& text) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  int pad = 0;
  for (char c : text) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+')
      v = 62;
    else if (c == '/')
      v = 63;
    else if (c == '=') {
      ++pad;
      continue;
    } else if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
      continue;
    else
      return std::nullopt;
    if (pad > 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (pad > 2 || bits >= 6) return std::nullopt;
  return out;
}

std::string RestConfig::host_port() const { return core::net::HostPort{host, port}.to_string(); }

std::string RestConfig::host_header() const {
  uint16_t def = scheme == "https" ? 443 : 80;
  if (port == def) return host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return host_port();
}

KubeconfigEnvironment KubeconfigEnvironment::from_process() {
  KubeconfigEnvironment env;
  if (const char* k = std::getenv("KUBECONFIG")) env.kubeconfig_env = k;
  if (const char* h = std::getenv("HOME")) env.home = h;
  if (const char* h = std::getenv("KUBERNETES_SERVICE_HOST")) env.service_host = h;
  if (const char* p = std::getenv("KUBERNETES_SERVICE_PORT")) env.service_port = p;
  return env;
}

RestConfig load_rest_config(const KubeconfigOverrides& ov, const KubeconfigEnvironment& env) {
  Merged m;
  if (!ov.kubeconfig.empty()) {
    merge_file(ov.kubeconfig, m);
  } else if (env.kubeconfig_env && !env.kubeconfig_env->empty()) {
    std::stringstream ss(*env.kubeconfig_env);
    std::string file;
    while (std::getline(ss, file, ':')) {
      if (file.empty() || !fs::exists(file)) continue;
      merge_file(file, m);
    }
  } else if (!env.home.empty() && fs::exists(fs::path(env.home) / ".kube" / "config")) {
    merge_file((fs::path(env.home) / ".kube" / "config").string(), m);
  }

  RestConfig rc;
  bool nothing_loaded =
      m.clusters.empty() && m.users.empty() && m.contexts.empty() && m.current_context.empty();
  if (nothing_loaded && ov.server.empty() && ov.context.empty() && ov.cluster.empty()) {
    if (!env.service_host.empty() && !env.service_port.empty()) {
      // In-cluster: the pod's service account, as rest.InClusterConfig.
      std::string dir = env.service_account_dir;
      std::string host = env.service_host;
      if (host.find(':') != std::string::npos) host = "[" + host + "]";
      rc.server = "https://" + host + ":" + env.service_port;
      rc.token_file = dir + "/token";
      try {
        rc.token = read_file(rc.token_file);
        rc.ca_pem = read_file(dir + "/ca.crt");
      } catch (const std::exception& e) {
        throw KubeconfigError(std::string("in-cluster configuration: ") + e.what());
      }
      rc.source = "in-cluster service account";
      parse_server(rc, "in-cluster configuration");
      while (!rc.token.empty() && (rc.token.back() == '\n' || rc.token.back() == '\r')) {
        rc.token.pop_back();
      }
      return rc;
    }
    throw KubeconfigError(
        "invalid configuration: no configuration has been provided, try setting KUBERNETES_MASTER "
        "environment variable (no kubeconfig found: --kubeconfig unset, $KUBECONFIG unset or "
        "naming no existing file, ~/.kube/config missing, and not running in a cluster)");
  }

  std::string files_text;
  for (const auto& f : m.files) files_text += (files_text.empty() ? "" : ", ") + dq(f);
  std::string origin = "kubeconfig " + (files_text.empty() ? std::string("(none)") : files_text);

  std::string context_name = ov.context.empty() ? m.current_context : ov.context;
  std::string cluster_name = ov.cluster;
  std::string user_name = ov.user;
  if (!context_name.empty()) {
    auto it = m.contexts.find(context_name);
    if (it == m.contexts.end()) {
      if (!ov.context.empty() || ov.server.empty()) {
        throw KubeconfigError(origin + ": context " + dq(context_name) + " does not exist");
      }
    } else {
      if (cluster_name.empty()) cluster_name = scalar(it->second.node, "cluster", it->second);
      if (user_name.empty()) user_name = scalar(it->second.node, "user", it->second);
    }
  }
  if (!cluster_name.empty()) {
    auto it = m.clusters.find(cluster_name);
    if (it == m.clusters.end()) {
      if (ov.server.empty()) {
        throw KubeconfigError(origin + ": cluster " + dq(cluster_name) + " does not exist");
      }
    } else {
      const Entry& e = it->second;
      rc.server = scalar(e.node, "server", e);
      rc.ca_pem = pem_field(e.node, "certificate-authority", e);
      rc.insecure_skip_tls_verify = boolean(e.node, "insecure-skip-tls-verify", e);
      rc.tls_server_name = scalar(e.node, "tls-server-name", e);
      rc.proxy_url = scalar(e.node, "proxy-url", e);
      if (rc.server.empty() && ov.server.empty()) {
        throw KubeconfigError("kubeconfig " + dq(e.file) + ": " + e.field +
                              ".server: no server found for cluster " + dq(cluster_name));
      }
    }
  }
  if (!user_name.empty()) {
    auto it = m.users.find(user_name);
    if (it != m.users.end()) {
      const Entry& e = it->second;
      rc.client_cert_pem = pem_field(e.node, "client-certificate", e);
      rc.client_key_pem = pem_field(e.node, "client-key", e);
      if (rc.client_cert_pem.empty() != rc.client_key_pem.empty()) {
        throw KubeconfigError("kubeconfig " + dq(e.file) + ": " + e.field + ".client-" +
                              (rc.client_key_pem.empty() ? "key" : "certificate") +
                              ": client-certificate and client-key must be given together");
      }
      rc.token = scalar(e.node, "token", e);
      std::string token_file = scalar(e.node, "tokenFile", e);
      if (!token_file.empty()) {
        rc.token_file = resolve(token_file, e.file);
        if (rc.token.empty()) {
          try {
            rc.token = read_file(rc.token_file);
          } catch (const std::exception& ex) {
            throw KubeconfigError("kubeconfig " + dq(e.file) + ": " + e.field +
                                  ".tokenFile: " + ex.what());
          }
        }
      }
      rc.username = scalar(e.node, "username", e);
      rc.password = scalar(e.node, "password", e);
      rc.impersonate_user = scalar(e.node, "as", e);
      if (e.node["as-groups"] && e.node["as-groups"].IsSequence()) {
        for (const auto& g : e.node["as-groups"])
          rc.impersonate_groups.push_back(g.as<std::string>());
      }
      if (YAML::Node x = e.node["exec"]; x && !x.IsNull()) {
        if (!x.IsMap()) {
          throw KubeconfigError("kubeconfig " + dq(e.file) + ": " + e.field +
                                ".exec: expected a mapping");
        }
        Entry xe{x, e.file, e.field + ".exec"};
        ExecConfig exec;
        exec.command = scalar(x, "command", xe);
        if (exec.command.empty()) {
          throw KubeconfigError("kubeconfig " + dq(e.file) + ": " + xe.field + ".command: missing");
        }
        if (exec.command.find('/') != std::string::npos)
          exec.command = resolve(exec.command, e.file);
        exec.api_version = scalar(x, "apiVersion", xe);
        if (exec.api_version != kExecV1 && exec.api_version != kExecV1beta1) {
          throw KubeconfigError("kubeconfig " + dq(e.file) + ": " + xe.field +
                                ".apiVersion: exec plugin: invalid apiVersion " +
                                dq(exec.api_version) + " (want " + kExecV1 + " or " + kExecV1beta1 +
                                ")");
        }
        if (x["args"] && x["args"].IsSequence()) {
          for (const auto& a : x["args"]) exec.args.push_back(a.as<std::string>());
        }
        if (x["env"] && x["env"].IsSequence()) {
          for (const auto& kv : x["env"]) {
            exec.env.emplace_back(kv["name"].as<std::string>(""), kv["value"].as<std::string>(""));
          }
        }
        rc.exec = std::move(exec);
      }
    } else if (!ov.user.empty()) {
      throw KubeconfigError(origin + ": user " + dq(user_name) + " does not exist");
    }
  }

  // Flag overrides, as kubectl's global flags.
  auto load_flag_file = [](const std::string& flag, const std::string& path) {
    try {
      return read_file(path);
    } catch (const std::exception& ex) {
      throw KubeconfigError("--" + flag + ": " + ex.what());
    }
  };
  if (!ov.server.empty()) rc.server = ov.server;
  if (!ov.certificate_authority.empty()) {
    rc.ca_pem = load_flag_file("certificate-authority", ov.certificate_authority);
  }
  if (ov.insecure_skip_tls_verify) {
    rc.insecure_skip_tls_verify = true;
    rc.ca_pem.clear();
  }
  if (!ov.tls_server_name.empty()) rc.tls_server_name = ov.tls_server_name;
  if (!ov.client_certificate.empty()) {
    rc.client_cert_pem = load_flag_file("client-certificate", ov.client_certificate);
  }
  if (!ov.client_key.empty()) rc.client_key_pem = load_flag_file("client-key", ov.client_key);
  if (!ov.token.empty()) {
    rc.token = ov.token;
    rc.token_file.clear();
  }
  if (!ov.as.empty()) rc.impersonate_user = ov.as;
  if (!ov.as_groups.empty()) rc.impersonate_groups = ov.as_groups;
  while (!rc.token.empty() && (rc.token.back() == '\n' || rc.token.back() == '\r')) {
    rc.token.pop_back();
  }

  if (rc.server.empty()) {
    throw KubeconfigError(origin + ": invalid configuration: no server found for cluster " +
                          dq(cluster_name));
  }
  parse_server(rc, origin);
  if (rc.tls_server_name.empty()) rc.tls_server_name = rc.host;
  rc.source = origin + (context_name.empty() ? "" : ", context " + dq(context_name));
  return rc;
}

CredentialSource::CredentialSource(const RestConfig& config, std::chrono::milliseconds exec_timeout)
    : config_(config), exec_timeout_(exec_timeout) {
  cached_ = config.token;
  if (!config.token_file.empty()) {
    cached_until_ = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  }
  if (config.exec) cached_.clear();
}

CredentialSource::~CredentialSource() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<CredentialSource::Credential> CredentialSource::cached_locked(
    std::chrono::steady_clock::time_point now) {
  Credential c;
  if (config_.exec) {
    if (!have_exec_ || now >= cached_until_) return std::nullopt;
    if (!cached_.empty()) c.authorization = "Bearer " + cached_;
    c.client_cert_pem = exec_cert_;
    c.client_key_pem = exec_key_;
    return c;
  }
  if (!config_.token_file.empty() && now >= cached_until_) {
    try {
      std::string t = read_file(config_.token_file);
      while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
      cached_ = t;
    } catch (const std::exception&) {
      // Keep the last good token, as client-go does when a refresh fails.
    }
    cached_until_ = now + std::chrono::minutes(1);
  }
  if (!cached_.empty()) {
    c.authorization = "Bearer " + cached_;
  } else if (!config_.username.empty() || !config_.password.empty()) {
    c.authorization = "Basic " + encode_base64(config_.username + ":" + config_.password);
  }
  return c;
}

std::optional<CredentialSource::Credential> CredentialSource::cached() {
  std::lock_guard lock(mu_);
  return cached_locked(std::chrono::steady_clock::now());
}

std::optional<CredentialSource::Credential> CredentialSource::last_exec() {
  std::lock_guard lock(mu_);
  if (!config_.exec || !have_exec_) return std::nullopt;
  Credential c;
  if (!cached_.empty()) c.authorization = "Bearer " + cached_;
  c.client_cert_pem = exec_cert_;
  c.client_key_pem = exec_key_;
  return c;
}

void CredentialSource::fetch(Callback done) {
  std::unique_lock lock(mu_);
  if (auto c = cached_locked(std::chrono::steady_clock::now())) {
    lock.unlock();
    done(std::move(*c));
    return;
  }
  waiters_.push_back(std::move(done));
  if (!thread_.joinable()) thread_ = std::thread([this] { runner(); });
  lock.unlock();
  wake_.notify_one();
}

CredentialSource::Credential CredentialSource::current() {
  std::promise<Credential> result;
  auto future = result.get_future();
  fetch([&result](Credential c) { result.set_value(std::move(c)); });
  return future.get();
}

void CredentialSource::runner() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_.load() || !waiters_.empty(); });
    // On shutdown, callers still waiting are dropped: their executors are going away.
    if (stopping_.load()) return;
    Credential c;
    if (auto fresh = cached_locked(std::chrono::steady_clock::now())) {
      c = std::move(*fresh);  // a run that just ended already answered them
    } else {
      lock.unlock();
      ExecOutput out = run_exec_plugin(*config_.exec, exec_timeout_, stopping_);
      lock.lock();
      if (stopping_.load()) return;
      if (out.error.empty()) {
        auto now = std::chrono::steady_clock::now();
        have_exec_ = true;
        cached_ = std::move(out.token);
        exec_cert_ = std::move(out.cert_pem);
        exec_key_ = std::move(out.key_pem);
        // No expiry: valid until the process ends (client-go re-runs on a 401; we do not).
        cached_until_ = now + std::chrono::hours(24 * 365);
        if (out.expiry)
          cached_until_ = now + std::chrono::seconds(*out.expiry - std::time(nullptr));
        if (!cached_.empty()) c.authorization = "Bearer " + cached_;
        c.client_cert_pem = exec_cert_;
        c.client_key_pem = exec_key_;
      } else {
        c.error = std::move(out.error);
      }
    }
    // Everyone who asked before or during the run gets its result.
    std::vector<Callback> waiters;
    waiters.swap(waiters_);
    lock.unlock();
    for (auto& w : waiters) w(c);
    lock.lock();
  }
}

RestConfig load_daemon_rest_config(const std::string& kubeconfig) {
  KubeconfigOverrides overrides;
  overrides.kubeconfig = kubeconfig;
  auto env = KubeconfigEnvironment::from_process();
  if (kubeconfig.empty()) {
    env.kubeconfig_env.reset();
    env.home.clear();
  }
  return load_rest_config(overrides, env);
}

}  // namespace konn::core::kube
