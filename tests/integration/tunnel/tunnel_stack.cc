#include "tests/integration/tunnel/tunnel_stack.h"

#include <stdexcept>

#include "test-client/channel.h"
#include "tests/support/loopback.h"

namespace konn::e2e {

using testsupport::Process;
using testsupport::ProcessOptions;

ServerProcess::ServerProcess(const testsupport::TempDir& dir, const testsupport::TestCerts& certs,
                             ServerSpec spec)
    : dir_(dir), certs_(certs), spec_(std::move(spec)) {
  uds_path_ = dir_.file("konn.sock");
  agent_port_ = testsupport::free_tcp_port();
  if (spec_.tcp_frontend) frontend_port_ = testsupport::free_tcp_port();
}

void ServerProcess::start(std::chrono::milliseconds timeout) {
  ProcessOptions o;
  o.binary = "proxy-server";
  o.log_path = dir_.file("server-" + std::to_string(++runs_) + ".log");
  o.args = {"--mode=grpc",
            "--agent-port=" + std::to_string(agent_port_),
            "--agent-bind-address=127.0.0.1",
            "--cluster-cert=" + certs_.server_crt,
            "--cluster-key=" + certs_.server_key,
            "--health-port=0",
            "--admin-port=0"};
  if (spec_.agent_mtls) o.args.push_back("--cluster-ca-cert=" + certs_.ca_crt);
  if (spec_.tcp_frontend) {
    o.args.push_back("--server-port=" + std::to_string(frontend_port_));
    o.args.push_back("--server-bind-address=127.0.0.1");
    o.args.push_back("--server-cert=" + certs_.server_crt);
    o.args.push_back("--server-key=" + certs_.server_key);
    o.args.push_back("--server-ca-cert=" + certs_.ca_crt);
  } else {
    o.args.push_back("--uds-name=" + uds_path_);
    o.args.push_back("--server-port=0");
  }
  o.args.insert(o.args.end(), spec_.extra_args.begin(), spec_.extra_args.end());
  process_ = std::make_unique<Process>(std::move(o));
  bool frontend_up = spec_.tcp_frontend ? process_->wait_for_tcp_port(frontend_port_, timeout)
                                        : process_->wait_for_unix_socket(uds_path_, timeout);
  if (!frontend_up || !process_->wait_for_tcp_port(agent_port_, timeout)) {
    throw std::runtime_error("proxy-server did not come up; log:\n" + process_->log());
  }
}

void ServerProcess::kill() {
  if (!process_) return;
  process_->kill(SIGKILL);
  process_->wait_exit(10s);
}

int ServerProcess::stop() { return process_ ? process_->terminate(10s) : -1; }

std::shared_ptr<grpc::Channel> ServerProcess::new_channel() const {
  testclient::ChannelConfig c;
  if (spec_.tcp_frontend) {
    c.host = "127.0.0.1";
    c.port = frontend_port_;
    c.ca_cert = certs_.ca_crt;
    c.client_cert = certs_.client_crt;
    c.client_key = certs_.client_key;
  } else {
    c.uds_path = uds_path_;
  }
  return testclient::make_channel(c);
}

bool ServerProcess::wait_agent_connected(const std::string& agent_id,
                                         std::chrono::milliseconds timeout,
                                         size_t occurrences) const {
  return process_ &&
         process_->wait_for_log("agent connected agentID=" + agent_id + " ", timeout, occurrences);
}

std::unique_ptr<Process> start_agent(const testsupport::TempDir& dir,
                                     const testsupport::TestCerts& certs, uint16_t agent_port,
                                     const AgentSpec& spec) {
  static int counter = 0;
  ProcessOptions o;
  o.binary = "proxy-agent";
  o.log_path = dir.file("agent-" + spec.id + "-" + std::to_string(++counter) + ".log");
  o.args = {"--proxy-server-host=127.0.0.1",
            "--proxy-server-port=" + std::to_string(agent_port),
            "--ca-cert=" + (spec.ca_cert.empty() ? certs.ca_crt : spec.ca_cert),
            "--agent-id=" + spec.id,
            "--sync-interval=100ms",
            "--sync-interval-cap=1s"};
  if (!spec.no_client_cert) {
    o.args.push_back("--agent-cert=" +
                     (spec.agent_cert.empty() ? certs.agent_crt : spec.agent_cert));
    o.args.push_back("--agent-key=" + (spec.agent_key.empty() ? certs.agent_key : spec.agent_key));
  }
  o.args.insert(o.args.end(), spec.extra_args.begin(), spec.extra_args.end());
  return std::make_unique<Process>(std::move(o));
}

TunnelStack::TunnelStack(ServerSpec server_spec, AgentSpec agent_spec)
    : certs(testsupport::test_certs()), server(dir, certs, std::move(server_spec)) {
  http.add_page("/hello", "hello through the tunnel\n");
  server.start();
  agent = start_agent(dir, certs, server.agent_port(), agent_spec);
  if (!server.wait_agent_connected(agent_spec.id, 20s)) {
    throw std::runtime_error("agent did not connect; server log:\n" + server.process().log() +
                             "\nagent log:\n" + agent->log());
  }
  channel = server.new_channel();
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + 10s)) {
    throw std::runtime_error("frontend channel did not connect");
  }
}

bool daemons_built() {
  return Process::bin_exists("proxy-server") && Process::bin_exists("proxy-agent");
}

}  // namespace konn::e2e
