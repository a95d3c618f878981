#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace konn::core::kube {

// A kubeconfig that cannot be used. what() names the file and the field, e.g.
// `kubeconfig "/home/a/.kube/config": users["alice"].user.client-certificate: open
// /home/a/.kube/alice.crt: No such file or directory`.
class KubeconfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Exec credential plugin (ExecCredential of client.authentication.k8s.io/v1 or v1beta1).
struct ExecConfig {
  std::string command;  // resolved against the file when relative
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string api_version;  // checked at load time: one of the two above
};

// How long an exec plugin may run before it is killed. kubectl waits forever; a daemon cannot
// (every request needing the credential waits for the run), and 30 s leaves room for a plugin
// that fetches a token over the network (aws, gcloud) on a slow day.
inline constexpr std::chrono::milliseconds kDefaultExecTimeout = std::chrono::seconds(30);

// Everything needed to talk to one apiserver: the result of kubeconfig selection, merging and
// overrides. PEM material is loaded; token files are re-read by current_token().
struct RestConfig {
  std::string server;  // as configured, e.g. "https://10.0.0.1:6443/k8s/clusters/c-1"
  std::string scheme;  // "https" or "http"
  std::string host;    // without brackets
  uint16_t port = 443;
  std::string path;  // server URL path without trailing '/', "" when none
  std::string ca_pem;
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name;  // SNI and verification name; defaults to `host`
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string token;
  std::string token_file;
  std::string username;
  std::string password;
  std::optional<ExecConfig> exec;
  std::string proxy_url;  // cluster proxy-url (http, https, socks5)
  std::string impersonate_user;
  std::vector<std::string> impersonate_groups;
  std::string source;  // for the startup log: which file/context, or "in-cluster"

  // "host:port" for dialling, with IPv6 brackets.
  std::string host_port() const;
  // The Host header value: host[:port], port omitted when it is the scheme's default.
  std::string host_header() const;
};

// Command-line overrides, as kubectl's global flags.
struct KubeconfigOverrides {
  std::string kubeconfig;  // --kubeconfig: this file only, no KUBECONFIG merge
  std::string context;
  std::string cluster;
  std::string user;
  std::string server;
  std::string token;
  std::string certificate_authority;
  std::string client_certificate;
  std::string client_key;
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name;
  std::string as;
  std::vector<std::string> as_groups;
};

// Process environment the loader consults; tests inject their own.
struct KubeconfigEnvironment {
  std::optional<std::string> kubeconfig_env;  // $KUBECONFIG
  std::string home;                           // $HOME
  std::string service_host;                   // $KUBERNETES_SERVICE_HOST
  std::string service_port;                   // $KUBERNETES_SERVICE_PORT
  std::string service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";

  static KubeconfigEnvironment from_process();
};

// Loads the client configuration as kubectl does:
//  - `--kubeconfig` names one file, which must exist; otherwise every file in $KUBECONFIG
//    (':'-separated; missing ones skipped) is merged, the first file to define a name (cluster,
//    user, context) or current-context winning; otherwise ~/.kube/config when it exists;
//  - relative paths are resolved against the file that holds them; `*-data` fields are base64;
//  - flags override the selected context, cluster and user;
//  - with no kubeconfig at all and no --server, the in-cluster service account is used.
// Throws KubeconfigError with a message naming the file and field.
RestConfig load_rest_config(const KubeconfigOverrides& overrides, const KubeconfigEnvironment& env);

// A daemon's --kubeconfig as upstream's BuildConfigFromFlags("", path) reads it: that file, or
// the in-cluster service account when `kubeconfig` is empty (never $KUBECONFIG or
// ~/.kube/config). Throws KubeconfigError.
RestConfig load_daemon_rest_config(const std::string& kubeconfig);

// Decodes standard base64 (whitespace ignored). nullopt on bad input.
std::optional<std::string> decode_base64(const std::string& text);
// Standard base64 with padding (Basic credentials).
std::string encode_base64(const std::string& raw);

// Credentials that can change at run time: token files are re-read at most once a minute (as
// client-go does), exec plugins are run when their credential is missing or expired.
//
// Exec plugins run on a thread of this object, never on the caller's: a run can take seconds (or
// hang, until `exec_timeout` kills it) and I/O threads must keep serving meanwhile. One run at a
// time: callers arriving while it runs wait for its result instead of starting another. A failed
// run is not cached: the next caller runs the plugin again (as client-go).
class CredentialSource {
 public:
  explicit CredentialSource(const RestConfig& config,
                            std::chrono::milliseconds exec_timeout = kDefaultExecTimeout);
  // Kills a running plugin (its whole process group) and waits for the runner thread.
  ~CredentialSource();
  CredentialSource(const CredentialSource&) = delete;
  CredentialSource& operator=(const CredentialSource&) = delete;

  struct Credential {
    std::string authorization;    // full header value ("Bearer x", "Basic y"), "" for none
    std::string client_cert_pem;  // from an exec plugin (with client_key_pem), "" for none: the
    std::string client_key_pem;   // kubeconfig's own client certificate applies then
    std::string error;            // why no credential could be had ("" when it could)
  };
  using Callback = std::function<void(Credential)>;

  // Without waiting: the credential when no exec plugin has to run for it, else nullopt.
  std::optional<Credential> cached();
  // The exec plugin's last successful output even when expired (never runs it); nullopt when it
  // never succeeded or there is no plugin. For callers that bring their own Authorization and
  // only need the client certificate.
  std::optional<Credential> last_exec();
  // Calls `done` with the credential: at once (on the calling thread) when cached() has it,
  // otherwise from the runner thread when the plugin run it waits for ends. `done` must not
  // block; it is called without any lock held.
  void fetch(Callback done);
  // Blocking form of fetch(), for callers that are not on an I/O thread.
  Credential current();

 private:
  std::optional<Credential> cached_locked(std::chrono::steady_clock::time_point now);
  void runner();

  const RestConfig& config_;
  const std::chrono::milliseconds exec_timeout_;
  std::mutex mu_;
  std::string cached_;  // bearer token (static, from the token file, or from the plugin)
  std::chrono::steady_clock::time_point cached_until_{};
  // Exec plugin state, under mu_.
  bool have_exec_ = false;  // a run succeeded; cached_, exec_cert_ and exec_key_ hold its output
  std::string exec_cert_;
  std::string exec_key_;
  std::vector<Callback> waiters_;  // callers of the next (or running) run
  bool running_ = false;
  std::condition_variable wake_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;  // started by the first run
};

}  // namespace konn::core::kube
