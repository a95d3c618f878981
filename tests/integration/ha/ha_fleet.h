#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/channel.h>

#include "tests/support/http_get.h"
#include "tests/support/process_runner.h"
#include "tests/support/prom_text.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace konn::e2e {

// The prefix of the proxy-server's upstream-named metrics.
inline const std::string kServer = "konnectivity_network_proxy_server_";

using namespace std::chrono_literals;
using testsupport::parse_prometheus_text;
using testsupport::PromParse;

using testsupport::http_get_local;
using testsupport::HttpAnswer;

// A proxy-server of an HA test: its own temp dir (unix frontend socket), fixed agent and health
// ports (so a restart keeps them), --server-id=<id>, mTLS agents.
class FleetServer {
 public:
  FleetServer(const testsupport::TestCerts& certs, std::string id,
              std::vector<std::string> extra_args);
  // Before start(): serve the frontend on TCP with mTLS (gRPC, or CONNECT with
  // --mode=http-connect) instead of the unix socket; returns its port.
  uint16_t use_tcp_frontend();
  // Starts and waits until the frontend socket, agent port and health port accept.
  void start();
  void kill();
  testsupport::Process& process() { return *process_; }
  const std::string& id() const { return id_; }
  uint16_t agent_port() const { return agent_port_; }
  uint16_t health_port() const { return health_port_; }
  // The frontend's unix socket (gRPC, or CONNECT with --mode=http-connect).
  std::string uds_path() const { return dir_.file("konn.sock"); }
  // A new frontend channel, connected (waits up to 10 s) unless `wait` is false.
  std::shared_ptr<grpc::Channel> channel(bool wait = true) const;
  PromParse metrics() const;
  // A series of /metrics ("name" + labels); nullopt when absent or /metrics does not answer.
  std::optional<double> metric(const std::string& name,
                               const std::map<std::string, std::string>& labels = {}) const;
  // Agents this server can route to with the default strategy (ready_backends).
  int ready_agents() const;

 private:
  const testsupport::TestCerts& certs_;
  std::string id_;
  std::vector<std::string> extra_args_;
  testsupport::TempDir dir_{"konn-ha"};
  uint16_t agent_port_;
  uint16_t health_port_;
  uint16_t frontend_port_ = 0;  // TCP frontend, when use_tcp_frontend() was called
  int runs_ = 0;
  std::unique_ptr<testsupport::Process> process_;
};

// A proxy-agent of an HA test, towards 127.0.0.1:<port> (a balancer or one server), with a
// fixed health port, sync-interval 100ms, cap 1s; `env` is added to the agent's environment.
class FleetAgent {
 public:
  FleetAgent(const testsupport::TempDir& dir, const testsupport::TestCerts& certs, std::string id,
             uint16_t server_port, std::vector<std::string> extra_args,
             std::vector<std::pair<std::string, std::string>> env = {});
  testsupport::Process& process() { return *process_; }
  const std::string& id() const { return id_; }
  uint16_t health_port() const { return health_port_; }
  // Ends the agent as kubelet's SIGTERM and the end of its drain would: SIGTERM, then, once it
  // drains, a second SIGTERM; SIGKILL if it has not exited within 5 s. Returns its exit status.
  int stop();
  PromParse metrics() const;
  std::optional<double> metric(const std::string& name,
                               const std::map<std::string, std::string>& labels = {}) const;
  // konnectivity_network_proxy_agent_open_server_connections (-1 when unreadable).
  int servers() const;
  // konn_agent_dials_total (-1 when unreadable).
  int dials() const;

 private:
  std::string id_;
  uint16_t health_port_;
  std::unique_ptr<testsupport::Process> process_;
};

}  // namespace konn::e2e
