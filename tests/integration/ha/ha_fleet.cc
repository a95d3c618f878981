#include "tests/integration/ha/ha_fleet.h"

#include <csignal>
#include <stdexcept>

#include <asio.hpp>

#include "test-client/channel.h"
#include "tests/support/loopback.h"

namespace konn::e2e {

using testsupport::Process;
using testsupport::ProcessOptions;

FleetServer::FleetServer(const testsupport::TestCerts& certs, std::string id,
                         std::vector<std::string> extra_args)
    : certs_(certs),
      id_(std::move(id)),
      extra_args_(std::move(extra_args)),
      agent_port_(testsupport::free_tcp_port()),
      health_port_(testsupport::free_tcp_port()) {}

uint16_t FleetServer::use_tcp_frontend() {
  if (frontend_port_ == 0) frontend_port_ = testsupport::free_tcp_port();
  return frontend_port_;
}

void FleetServer::start() {
  ProcessOptions o;
  o.binary = "proxy-server";
  o.log_path = dir_.file("server-" + id_ + "-" + std::to_string(++runs_) + ".log");
  o.args = {"--mode=grpc"};
  if (frontend_port_ != 0) {
    o.args.insert(o.args.end(),
                  {"--server-port=" + std::to_string(frontend_port_),
                   "--server-bind-address=127.0.0.1", "--server-cert=" + certs_.server_crt,
                   "--server-key=" + certs_.server_key, "--server-ca-cert=" + certs_.ca_crt});
  } else {
    o.args.insert(o.args.end(), {"--uds-name=" + dir_.file("konn.sock"), "--server-port=0"});
  }
  o.args.insert(
      o.args.end(),
      {"--agent-port=" + std::to_string(agent_port_), "--agent-bind-address=127.0.0.1",
       "--cluster-cert=" + certs_.server_crt, "--cluster-key=" + certs_.server_key,
       "--cluster-ca-cert=" + certs_.ca_crt, "--health-port=" + std::to_string(health_port_),
       "--health-bind-address=127.0.0.1", "--admin-port=0", "--server-id=" + id_});
  o.args.insert(o.args.end(), extra_args_.begin(), extra_args_.end());
  process_ = std::make_unique<Process>(std::move(o));
  bool frontend_up = frontend_port_ != 0
                         ? process_->wait_for_tcp_port(frontend_port_, 20s)
                         : process_->wait_for_unix_socket(dir_.file("konn.sock"), 20s);
  if (!frontend_up || !process_->wait_for_tcp_port(agent_port_, 20s) ||
      !process_->wait_for_tcp_port(health_port_, 20s)) {
    throw std::runtime_error("proxy-server " + id_ + " did not come up; log:\n" + process_->log());
  }
}

void FleetServer::kill() {
  process_->kill(SIGKILL);
  process_->wait_exit(10s);
}

std::shared_ptr<grpc::Channel> FleetServer::channel(bool wait) const {
  testclient::ChannelConfig c;
  c.uds_path = dir_.file("konn.sock");
  auto ch = testclient::make_channel(c);
  if (wait) ch->WaitForConnected(std::chrono::system_clock::now() + 10s);
  return ch;
}

PromParse FleetServer::metrics() const {
  auto r = http_get_local(health_port_, "/metrics");
  if (r.status != 200) {
    PromParse p;
    p.errors.push_back("/metrics answered " + std::to_string(r.status));
    return p;
  }
  return parse_prometheus_text(r.body);
}

std::optional<double> FleetServer::metric(const std::string& name,
                                          const std::map<std::string, std::string>& labels) const {
  return metrics().value(name, labels);
}

int FleetServer::ready_agents() const {
  auto v =
      metric("konnectivity_network_proxy_server_ready_backends", {{"proxy_strategy", "default"}});
  return v ? static_cast<int>(*v) : -1;
}

FleetAgent::FleetAgent(const testsupport::TempDir& dir, const testsupport::TestCerts& certs,
                       std::string id, uint16_t server_port, std::vector<std::string> extra_args,
                       std::vector<std::pair<std::string, std::string>> env)
    : id_(std::move(id)), health_port_(testsupport::free_tcp_port()) {
  static int counter = 0;
  ProcessOptions o;
  o.binary = "proxy-agent";
  o.log_path = dir.file("agent-" + id_ + "-" + std::to_string(++counter) + ".log");
  o.args = {"--proxy-server-host=127.0.0.1",
            "--proxy-server-port=" + std::to_string(server_port),
            "--ca-cert=" + certs.ca_crt,
            "--agent-cert=" + certs.agent_crt,
            "--agent-key=" + certs.agent_key,
            "--agent-id=" + id_,
            "--sync-interval=100ms",
            "--sync-interval-cap=1s",
            "--probe-interval=200ms",
            "--health-server-host=127.0.0.1",
            "--health-server-port=" + std::to_string(health_port_),
            "--admin-server-port=0"};
  o.args.insert(o.args.end(), extra_args.begin(), extra_args.end());
  o.env = std::move(env);
  process_ = std::make_unique<Process>(std::move(o));
  if (!process_->wait_for_tcp_port(health_port_, 20s)) {
    throw std::runtime_error("proxy-agent " + id_ + " did not come up; log:\n" + process_->log());
  }
}

int FleetAgent::stop() {
  process_->kill(SIGTERM);
  // The two signals apart: a second SIGTERM sent before the first was handled merges with it.
  process_->wait_for_log("draining;", 5s);
  return process_->terminate(5s);
}

PromParse FleetAgent::metrics() const {
  auto r = http_get_local(health_port_, "/metrics");
  if (r.status != 200) {
    PromParse p;
    p.errors.push_back("/metrics answered " + std::to_string(r.status));
    return p;
  }
  return parse_prometheus_text(r.body);
}

std::optional<double> FleetAgent::metric(const std::string& name,
                                         const std::map<std::string, std::string>& labels) const {
  return metrics().value(name, labels);
}

int FleetAgent::servers() const {
  auto v = metric("konnectivity_network_proxy_agent_open_server_connections");
  return v ? static_cast<int>(*v) : -1;
}

int FleetAgent::dials() const {
  auto v = metric("konn_agent_dials_total");
  return v ? static_cast<int>(*v) : -1;
}

}  // namespace konn::e2e
