#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/channel.h>

#include "tests/support/echo_server.h"
#include "tests/support/http_server.h"
#include "tests/support/process_runner.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace konn::e2e {

using namespace std::chrono_literals;

// How to run the proxy-server binary.
struct ServerSpec {
  bool tcp_frontend = false;  // TCP + mTLS frontend instead of the unix socket
  bool agent_mtls = true;     // --cluster-ca-cert: agents must present a client certificate
  std::vector<std::string> extra_args;
};

// The proxy-server binary with its ports fixed for its whole life, so it can be restarted in
// place. Each start logs to a new file (server-<n>.log in the stack's directory).
class ServerProcess {
 public:
  ServerProcess(const testsupport::TempDir& dir, const testsupport::TestCerts& certs,
                ServerSpec spec);

  // Starts the binary and waits until the frontend and the agent port accept connections.
  // Throws std::runtime_error (with the log) when it does not come up within `timeout`.
  void start(std::chrono::milliseconds timeout = 20s);
  // SIGKILL and reap.
  void kill();
  // SIGTERM; returns the exit status.
  int stop();

  testsupport::Process& process() { return *process_; }
  bool running() const { return process_ && process_->running(); }
  const std::string& uds_path() const { return uds_path_; }
  uint16_t agent_port() const { return agent_port_; }
  uint16_t frontend_port() const { return frontend_port_; }

  // A new channel (a new HTTP/2 connection) to the frontend: the unix socket, or TCP with the
  // kube-apiserver client certificate.
  std::shared_ptr<grpc::Channel> new_channel() const;

  // Waits until this run's log shows agent `agent_id` connected `occurrences` times.
  bool wait_agent_connected(const std::string& agent_id, std::chrono::milliseconds timeout,
                            size_t occurrences = 1) const;

 private:
  const testsupport::TempDir& dir_;
  const testsupport::TestCerts& certs_;
  ServerSpec spec_;
  std::string uds_path_;
  uint16_t agent_port_ = 0;
  uint16_t frontend_port_ = 0;
  int runs_ = 0;
  std::unique_ptr<testsupport::Process> process_;
};

// How to run one proxy-agent binary.
struct AgentSpec {
  std::string id = "agent-1";
  // Empty: the shared test certificates.
  std::string ca_cert, agent_cert, agent_key;
  bool no_client_cert = false;  // present no certificate at all
  std::vector<std::string> extra_args;
};

// Starts a proxy-agent towards 127.0.0.1:<agent_port> with sync-interval 100ms, cap 1s.
std::unique_ptr<testsupport::Process> start_agent(const testsupport::TempDir& dir,
                                                  const testsupport::TestCerts& certs,
                                                  uint16_t agent_port, const AgentSpec& spec);

// The usual end-to-end setup: a temp dir, certificates, an HTTP origin (page /hello), an echo
// origin, a proxy-server and one connected agent ("agent-1").
struct TunnelStack {
  explicit TunnelStack(ServerSpec server_spec = {}, AgentSpec agent_spec = {});

  testsupport::TempDir dir{"konn-e2e"};
  const testsupport::TestCerts& certs;
  testsupport::HttpServer http;
  testsupport::EchoServer echo{true};  // hashes what each connection received
  ServerProcess server;
  std::unique_ptr<testsupport::Process> agent;
  std::shared_ptr<grpc::Channel> channel;  // a channel to the frontend, connected
};

// True when the built daemons exist (the e2e tests skip with a message otherwise).
bool daemons_built();

}  // namespace konn::e2e
