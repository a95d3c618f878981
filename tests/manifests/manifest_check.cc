// konn_manifest_check: keeps manifests/ true to the binaries.
//
//   konn_manifest_check render <kustomize-dir>
//       Renders the kustomization with `kubectl kustomize` and runs every container of our four
//       images with its command line (Kubernetes' $(VAR) expansion applied, ConfigMap volumes
//       written to a scratch directory) plus --check-config: each must print "configuration OK".
//   konn_manifest_check egress <variant-dir> <kube-apiserver-pod.yaml>
//       Checks <variant-dir>/egress-selector-configuration.yaml against the proxy-server that the
//       kustomizations below <variant-dir> render (mode, unix socket or TCP port), and applies
//       <variant-dir>/kube-apiserver-patch.yaml to a kubeadm-shaped kube-apiserver pod: the
//       socket and every file the configuration names must be visible to kube-apiserver, the
//       socket through the same host directory the server writes it to.
//
// Environment: KONN_KUBECTL (default "kubectl"), KONN_BIN_DIR (the built daemons).
// Exit status: 0 when everything holds, 1 with one line per problem otherwise.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <yaml-cpp/yaml.h>

extern char** environ;

namespace {

namespace fs = std::filesystem;

// Image name (last path segment, without tag) → the binary it runs.
constexpr std::array<std::string_view, 4> kDaemons = {"proxy-server", "proxy-agent", "socks5",
                                                      "kubeproxy-http"};

std::vector<std::string> g_problems;

void problem(const std::string& what) {
  g_problems.push_back(what);
  std::cerr << "FAIL: " << what << "\n";
}

struct Run {
  int exit_code = -1;
  std::string output;
};

// Runs argv (no shell) with `env` added to ours; stdout and stderr together.
Run run(const std::vector<std::string>& argv,
        const std::vector<std::pair<std::string, std::string>>& env = {}) {
  Run r;
  std::array<int, 2> fds{};
  if (::pipe(fds.data()) != 0) return r;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);

  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    bool replaced =
        std::any_of(env.begin(), env.end(), [&](const auto& kv) { return kv.first == name; });
    if (!replaced) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  cargv.reserve(args.size() + 1);
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  pid_t pid = -1;
  int rc = posix_spawnp(&pid, cargv[0], &actions, nullptr, cargv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    r.output = "cannot start " + argv[0];
    return r;
  }
  std::array<char, 4096> buf{};
  ssize_t n = 0;
  while ((n = ::read(fds[0], buf.data(), buf.size())) > 0) {
    r.output.append(buf.data(), static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::optional<std::vector<YAML::Node>> render(const std::string& dir) {
  auto r = run({env_or("KONN_KUBECTL", "kubectl"), "kustomize", dir});
  if (r.exit_code != 0) {
    problem("kubectl kustomize " + dir + " failed (" + std::to_string(r.exit_code) +
            "): " + r.output);
    return std::nullopt;
  }
  try {
    std::vector<YAML::Node> docs;
    for (auto& d : YAML::LoadAll(r.output)) {
      if (d.IsMap()) docs.push_back(d);
    }
    return docs;
  } catch (const YAML::Exception& e) {
    problem("rendered " + dir + " is not YAML: " + e.what());
    return std::nullopt;
  }
}

std::string str(const YAML::Node& n) { return n && n.IsScalar() ? n.as<std::string>() : ""; }

std::vector<std::string> strings(const YAML::Node& n) {
  std::vector<std::string> out;
  if (n && n.IsSequence()) {
    for (const auto& s : n) out.push_back(str(s));
  }
  return out;
}

// The pod spec of a workload object, or an undefined node.
YAML::Node pod_spec(const YAML::Node& obj) {
  std::string kind = str(obj["kind"]);
  if (kind == "Pod") return obj["spec"];
  if (kind == "Deployment" || kind == "DaemonSet" || kind == "StatefulSet" ||
      kind == "ReplicaSet" || kind == "Job") {
    return obj["spec"]["template"]["spec"];
  }
  if (kind == "CronJob") return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"];
  return YAML::Node(YAML::NodeType::Undefined);
}

std::string image_daemon(const std::string& image) {
  std::string name = image.substr(0, image.find_first_of(":@"));
  auto slash = name.rfind('/');
  if (slash != std::string::npos) name = name.substr(slash + 1);
  return std::find(kDaemons.begin(), kDaemons.end(), name) != kDaemons.end() ? name : "";
}

std::string basename_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Kubernetes' expansion of $(VAR) in command and args: defined variables are replaced, $$ is a
// literal $, anything else stays as written.
std::string expand(const std::string& in, const std::map<std::string, std::string>& vars) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '$' && i + 1 < in.size() && in[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    if (in[i] == '$' && i + 1 < in.size() && in[i + 1] == '(') {
      auto close = in.find(')', i + 2);
      if (close != std::string::npos) {
        auto it = vars.find(in.substr(i + 2, close - i - 2));
        if (it != vars.end()) {
          out += it->second;
          i = close;
          continue;
        }
      }
    }
    out += in[i];
  }
  return out;
}

// What the downward API would give, close enough for flag validation.
std::string field_value(const std::string& path) {
  if (path == "spec.nodeName") return "node-a";
  if (path == "status.hostIP" || path == "status.podIP") return "10.0.0.10";
  if (path == "metadata.name") return "pod-a";
  if (path == "metadata.namespace") return "kube-system";
  return "value-of-" + path;
}

struct Rendered {
  std::vector<YAML::Node> docs;
  std::map<std::string, YAML::Node> config_maps;  // "namespace/name" → data

  YAML::Node config_map(const std::string& ns, const std::string& name) const {
    auto it = config_maps.find(ns + "/" + name);
    return it == config_maps.end() ? YAML::Node(YAML::NodeType::Undefined) : it->second;
  }
};

Rendered index(std::vector<YAML::Node> docs) {
  Rendered r;
  for (const auto& d : docs) {
    if (str(d["kind"]) == "ConfigMap") {
      std::string ns = str(d["metadata"]["namespace"]);
      r.config_maps[(ns.empty() ? "default" : ns) + "/" + str(d["metadata"]["name"])] = d["data"];
    }
  }
  r.docs = std::move(docs);
  return r;
}

std::string ns_of(const YAML::Node& obj) {
  std::string ns = str(obj["metadata"]["namespace"]);
  return ns.empty() ? "default" : ns;
}

// The container's environment as the kubelet would build it (values, downward API, ConfigMap
// keys), for $(VAR) expansion and the process itself.
std::vector<std::pair<std::string, std::string>> container_env(const Rendered& r,
                                                               const std::string& ns,
                                                               const YAML::Node& c,
                                                               const std::string& where) {
  std::vector<std::pair<std::string, std::string>> env;
  std::map<std::string, std::string> vars;
  for (const auto& from : c["envFrom"]) {
    if (from["configMapRef"]) {
      auto data = r.config_map(ns, str(from["configMapRef"]["name"]));
      if (!data) {
        problem(where + ": envFrom names ConfigMap " + str(from["configMapRef"]["name"]) +
                ", which the kustomization does not render");
        continue;
      }
      for (const auto& kv : data) {
        env.emplace_back(str(kv.first), str(kv.second));
        vars[str(kv.first)] = str(kv.second);
      }
    }
  }
  for (const auto& e : c["env"]) {
    std::string name = str(e["name"]);
    std::string value;
    if (e["value"]) {
      value = expand(str(e["value"]), vars);
    } else if (e["valueFrom"]["fieldRef"]) {
      value = field_value(str(e["valueFrom"]["fieldRef"]["fieldPath"]));
    } else if (e["valueFrom"]["configMapKeyRef"]) {
      const auto& ref = e["valueFrom"]["configMapKeyRef"];
      auto data = r.config_map(ns, str(ref["name"]));
      if (!data || !data[str(ref["key"])]) {
        problem(where + ": env " + name + " names ConfigMap key " + str(ref["name"]) + "/" +
                str(ref["key"]) + ", which the kustomization does not render");
        continue;
      }
      value = str(data[str(ref["key"])]);
    } else {
      value = "placeholder";  // secrets, resource fields
    }
    env.emplace_back(name, value);
    vars[name] = value;
  }
  return env;
}

// Writes the container's ConfigMap volumes below `root` (at root + mountPath) and returns the
// mount paths, longest first, so that arguments naming them can be redirected.
std::vector<std::string> materialize_config_maps(const Rendered& r, const std::string& ns,
                                                 const YAML::Node& spec, const YAML::Node& c,
                                                 const std::string& root,
                                                 const std::string& where) {
  std::vector<std::string> mounts;
  for (const auto& m : c["volumeMounts"]) {
    for (const auto& v : spec["volumes"]) {
      if (str(v["name"]) != str(m["name"]) || !v["configMap"]) continue;
      std::string cm = str(v["configMap"]["name"]);
      auto data = r.config_map(ns, cm);
      if (!data) {
        problem(where + ": volume " + str(v["name"]) + " names ConfigMap " + cm +
                ", which the kustomization does not render");
        continue;
      }
      std::string mount = str(m["mountPath"]);
      std::string sub = str(m["subPath"]);
      for (const auto& kv : data) {
        std::string key = str(kv.first);
        std::string file = key;
        if (v["configMap"]["items"]) {
          file.clear();
          for (const auto& item : v["configMap"]["items"]) {
            if (str(item["key"]) == key) file = str(item["path"]);
          }
          if (file.empty()) continue;
        }
        fs::path target;
        if (!sub.empty()) {
          if (sub != file) continue;
          target = fs::path(root + mount);
        } else {
          target = fs::path(root + mount) / file;
        }
        fs::create_directories(target.parent_path());
        std::ofstream(target) << str(kv.second);
      }
      mounts.push_back(mount);
    }
  }
  std::sort(mounts.begin(), mounts.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return mounts;
}

int check_render(const std::string& dir) {
  auto docs = render(dir);
  if (!docs) return 1;
  Rendered r = index(std::move(*docs));
  std::string bin_dir = env_or("KONN_BIN_DIR", "");
  std::error_code ec;
  fs::path scratch = fs::temp_directory_path() / ("konn-manifests-" + std::to_string(::getpid()));
  int checked = 0;
  for (const auto& obj : r.docs) {
    auto spec = pod_spec(obj);
    if (!spec) continue;
    std::string ns = ns_of(obj);
    for (const char* list : {"initContainers", "containers"}) {
      for (const auto& c : spec[list]) {
        std::string daemon = image_daemon(str(c["image"]));
        if (daemon.empty()) continue;
        std::string where = dir + ": " + str(obj["kind"]) + " " + ns + "/" +
                            str(obj["metadata"]["name"]) + " container " + str(c["name"]);
        auto command = strings(c["command"]);
        auto args = strings(c["args"]);
        if (!command.empty() && basename_of(command[0]) != daemon) {
          problem(where + ": image " + str(c["image"]) + " runs " + daemon + ", command is " +
                  command[0]);
          continue;
        }
        if (!command.empty()) command.erase(command.begin());
        command.insert(command.end(), args.begin(), args.end());

        auto env = container_env(r, ns, c, where);
        std::map<std::string, std::string> vars(env.begin(), env.end());
        std::string root = (scratch / std::to_string(checked)).string();
        auto mounts = materialize_config_maps(r, ns, spec, c, root, where);

        std::vector<std::string> argv{bin_dir.empty() ? daemon : bin_dir + "/" + daemon,
                                      "--check-config"};
        for (const auto& a : command) {
          std::string arg = expand(a, vars);
          for (const auto& m : mounts) {
            auto at = arg.find(m);
            if (at != std::string::npos &&
                (at + m.size() == arg.size() || arg[at + m.size()] == '/')) {
              arg.insert(at, root);
              break;
            }
          }
          argv.push_back(arg);
        }
        auto result = run(argv, env);
        ++checked;
        std::string shown;
        for (size_t i = 1; i < argv.size(); ++i) shown += " " + argv[i];
        if (result.exit_code != 0 || result.output.find("configuration OK") == std::string::npos) {
          problem(where + ": " + daemon + shown + " exited " + std::to_string(result.exit_code) +
                  ":\n" + result.output);
        } else {
          std::cout << "ok: " << where << ": " << daemon << shown << "\n";
        }
      }
    }
  }
  fs::remove_all(scratch, ec);
  std::cout << dir << ": " << checked << " container command line(s) checked\n";
  return g_problems.empty() ? 0 : 1;
}

// The value of --name=value (last one wins, as pflag), or nullopt.
std::optional<std::string> flag_value(const std::vector<std::string>& args,
                                      const std::string& name) {
  std::optional<std::string> value;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string prefix = "--" + name;
    if (a == prefix && i + 1 < args.size()) {
      value = args[i + 1];
    } else if (a.rfind(prefix + "=", 0) == 0) {
      value = a.substr(prefix.size() + 1);
    }
  }
  return value;
}

struct Mount {
  std::string mount_path;
  std::string host_path;  // empty when the volume is not a hostPath
};

std::vector<Mount> mounts_of(const YAML::Node& spec, const YAML::Node& c) {
  std::vector<Mount> out;
  for (const auto& m : c["volumeMounts"]) {
    Mount mount{str(m["mountPath"]), ""};
    for (const auto& v : spec["volumes"]) {
      if (str(v["name"]) == str(m["name"]) && v["hostPath"]) {
        mount.host_path = str(v["hostPath"]["path"]);
      }
    }
    out.push_back(mount);
  }
  return out;
}

// Where a container path lives on the host, through the longest mount that holds it.
std::optional<std::string> host_path(const std::vector<Mount>& mounts, const std::string& path) {
  const Mount* best = nullptr;
  for (const auto& m : mounts) {
    const auto& p = m.mount_path;
    bool under = path == p || (path.rfind(p, 0) == 0 && (p.back() == '/' || path[p.size()] == '/'));
    if (under && (best == nullptr || p.size() > best->mount_path.size())) best = &m;
  }
  if (best == nullptr || best->host_path.empty()) return std::nullopt;
  return best->host_path + path.substr(best->mount_path.size());
}

int check_egress(const std::string& variant, const std::string& apiserver_pod) {
  fs::path egress_file = fs::path(variant) / "egress-selector-configuration.yaml";
  fs::path patch_file = fs::path(variant) / "kube-apiserver-patch.yaml";
  YAML::Node egress;
  try {
    egress = YAML::LoadFile(egress_file.string());
  } catch (const YAML::Exception& e) {
    problem(egress_file.string() + ": " + e.what());
    return 1;
  }
  if (str(egress["apiVersion"]) != "apiserver.k8s.io/v1beta1" ||
      str(egress["kind"]) != "EgressSelectorConfiguration") {
    problem(egress_file.string() + ": want apiserver.k8s.io/v1beta1 EgressSelectorConfiguration");
  }
  YAML::Node connection;
  for (const auto& sel : egress["egressSelections"]) {
    if (str(sel["name"]) == "cluster") connection = sel["connection"];
  }
  if (!connection) {
    problem(egress_file.string() + ": no egress selection named cluster");
    return 1;
  }
  std::string protocol = str(connection["proxyProtocol"]);
  std::string want_mode = protocol == "GRPC"          ? "grpc"
                          : protocol == "HTTPConnect" ? "http-connect"
                                                      : "";
  if (want_mode.empty()) problem(egress_file.string() + ": proxyProtocol " + protocol);
  std::string uds = str(connection["transport"]["uds"]["udsName"]);
  std::string url = str(connection["transport"]["tcp"]["url"]);
  if (uds.empty() == url.empty()) {
    problem(egress_file.string() +
            ": want exactly one of transport.uds.udsName, transport.tcp.url");
    return 1;
  }
  if (protocol == "GRPC" && uds.empty()) problem(egress_file.string() + ": GRPC needs uds");

  // The proxy-server the variant's kustomizations render.
  std::vector<std::string> kustomizations;
  for (const auto& e : fs::recursive_directory_iterator(variant)) {
    if (e.path().filename() == "kustomization.yaml") {
      kustomizations.push_back(e.path().parent_path().string());
    }
  }
  std::sort(kustomizations.begin(), kustomizations.end());
  int servers = 0;
  std::optional<std::string> server_socket_on_host;
  for (const auto& k : kustomizations) {
    auto docs = render(k);
    if (!docs) continue;
    Rendered rendered = index(std::move(*docs));
    for (const auto& obj : rendered.docs) {
      auto spec = pod_spec(obj);
      if (!spec) continue;
      for (const auto& c : spec["containers"]) {
        if (image_daemon(str(c["image"])) != "proxy-server") continue;
        ++servers;
        std::string where = k + ": " + str(obj["metadata"]["name"]);
        auto args = strings(c["args"]);
        std::string mode = flag_value(args, "mode").value_or("grpc");
        if (mode != want_mode) {
          problem(where + ": --mode=" + mode + " but the egress selector says " + protocol);
        }
        if (!uds.empty()) {
          auto name = flag_value(args, "uds-name");
          if (name != uds) {
            problem(where + ": --uds-name=" + name.value_or("(unset)") +
                    " but the egress selector dials " + uds);
          } else {
            server_socket_on_host = host_path(mounts_of(spec, c), uds);
            if (!server_socket_on_host) {
              problem(where + ": the socket " + uds + " is not in a hostPath volume");
            }
          }
        } else {
          // url is https://host:port; the port must reach --server-port through a Service.
          auto port_at = url.rfind(':');
          std::string port = url.substr(port_at + 1);
          auto server_port = flag_value(args, "server-port").value_or("8090");
          if (url.rfind("https://", 0) != 0) problem(egress_file.string() + ": url must be https");
          if (!connection["transport"]["tcp"]["tlsConfig"]["clientCert"]) {
            problem(egress_file.string() + ": the server requires a client certificate");
          }
          bool served = false;
          for (const auto& svc : rendered.docs) {
            if (str(svc["kind"]) != "Service") continue;
            std::string svc_host = str(svc["metadata"]["name"]) + "." + ns_of(svc) + ".svc";
            if (url.find("//" + svc_host + ":") == std::string::npos &&
                url.find("//" + svc_host + ".cluster.local:") == std::string::npos) {
              continue;
            }
            for (const auto& p : svc["spec"]["ports"]) {
              if (str(p["port"]) != port) continue;
              std::string target = str(p["targetPort"]);
              if (target.empty()) target = port;
              for (const auto& cp : c["ports"]) {
                if ((str(cp["name"]) == target || str(cp["containerPort"]) == target) &&
                    str(cp["containerPort"]) == server_port) {
                  served = true;
                }
              }
            }
          }
          if (!served) {
            problem(where + ": no Service of " + k + " takes " + url +
                    " to the container's --server-port=" + server_port);
          }
        }
      }
    }
  }
  if (servers == 0) problem(variant + ": no proxy-server container below it");

  // kube-apiserver, patched as the variant says.
  fs::path scratch = fs::temp_directory_path() / ("konn-egress-" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  fs::copy_file(apiserver_pod, scratch / "kube-apiserver.yaml",
                fs::copy_options::overwrite_existing);
  fs::copy_file(patch_file, scratch / "kube-apiserver-patch.yaml",
                fs::copy_options::overwrite_existing);
  std::ofstream(scratch / "kustomization.yaml")
      << "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
         "resources: [kube-apiserver.yaml]\npatches:\n  - path: kube-apiserver-patch.yaml\n"
         "    target: {kind: Pod, name: kube-apiserver}\n";
  auto docs = render(scratch.string());
  std::error_code ec;
  fs::remove_all(scratch, ec);
  if (!docs || docs->empty()) return 1;
  const auto& pod = docs->front();
  const auto& apiserver = pod["spec"]["containers"][0];
  auto mounts = mounts_of(pod["spec"], apiserver);
  auto command = strings(apiserver["command"]);
  auto config_flag = flag_value(command, "egress-selector-config-file");
  if (!config_flag) {
    problem(patch_file.string() + ": kube-apiserver gets no --egress-selector-config-file");
  } else if (!host_path(mounts, *config_flag)) {
    problem(patch_file.string() + ": " + *config_flag + " is not in a hostPath mount");
  }
  if (!uds.empty()) {
    auto on_host = host_path(mounts, uds);
    if (!on_host) {
      problem(patch_file.string() + ": kube-apiserver does not mount the directory of " + uds);
    } else if (server_socket_on_host && *on_host != *server_socket_on_host) {
      problem(patch_file.string() + ": kube-apiserver finds " + uds + " at host path " + *on_host +
              ", the server creates it at " + *server_socket_on_host);
    }
  }
  for (const char* key : {"caBundle", "clientCert", "clientKey"}) {
    std::string file = str(connection["transport"]["tcp"]["tlsConfig"][key]);
    if (!file.empty() && !host_path(mounts, file)) {
      problem(patch_file.string() + ": kube-apiserver does not mount " + file + " (" + key + ")");
    }
  }
  if (g_problems.empty()) {
    std::cout << variant << ": " << protocol << " over " << (uds.empty() ? url : "unix:" + uds)
              << " matches " << servers << " proxy-server(s) and kube-apiserver's mounts\n";
  }
  return g_problems.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 2 && args[0] == "render") return check_render(args[1]);
    if (args.size() == 3 && args[0] == "egress") return check_egress(args[1], args[2]);
  } catch (const std::exception& e) {
    std::cerr << "FAIL: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: konn_manifest_check render <kustomize-dir>\n"
               "       konn_manifest_check egress <variant-dir> <kube-apiserver-pod.yaml>\n";
  return 2;
}
