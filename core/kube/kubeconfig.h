#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace konn::core::kube {

// A kubeconfig that cannot be used. what() names the file and the field, e.g.
// `kubeconfig "/home/a/.kube/config": users["alice"].user.client-certificate: open
// /home/a/.kube/alice.crt: No such file or directory`.
class KubeconfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Exec credential plugin (client.authentication.k8s.io/v1 ExecCredential).
struct ExecConfig {
  std::string command;                                 // resolved against the file when relative
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string api_version;
};

// Everything needed to talk to one apiserver: the result of kubeconfig selection, merging and
// overrides. PEM material is loaded; token files are re-read by current_token().
struct RestConfig {
  std::string server;      // as configured, e.g. "https://10.0.0.1:6443/k8s/clusters/c-1"
  std::string scheme;      // "https" or "http"
  std::string host;        // without brackets
  uint16_t port = 443;
  std::string path;        // server URL path without trailing '/', "" when none
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
  std::string proxy_url;   // cluster proxy-url (http, https, socks5)
  std::string impersonate_user;
  std::vector<std::string> impersonate_groups;
  std::string source;      // for the startup log: which file/context, or "in-cluster"

  // "host:port" for dialling, with IPv6 brackets.
  std::string host_port() const;
  // The Host header value: host[:port], port omitted when it is the scheme's default.
  std::string host_header() const;
};

// Command-line overrides, as kubectl's global flags.
struct KubeconfigOverrides {
  std::string kubeconfig;   // --kubeconfig: this file only, no KUBECONFIG merge
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
class CredentialSource {
 public:
  explicit CredentialSource(const RestConfig& config);

  struct Credential {
    std::string authorization;  // full header value ("Bearer x", "Basic y"), "" for none
    std::string error;          // why no credential could be had
  };
  // Thread-safe; may run an exec plugin (blocking) when its cached credential expired.
  Credential current();

 private:
  Credential run_exec();

  const RestConfig& config_;
  std::mutex mu_;
  std::string cached_;
  std::chrono::steady_clock::time_point cached_until_{};
};

}  // namespace konn::core::kube
