#pragma once

#include <map>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "tests/integration/ha/ha_fleet.h"
#include "tests/support/tcp_balancer.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace konn::soak {

// Open descriptors of a process (/proc/<pid>/fd), -1 when unreadable.
int count_fds(pid_t pid);
// What the descriptors of a process are, counted by kind ("socket", "anon_inode:[eventfd]",
// "pipe", a file's path), for telling what a leak is made of.
std::map<std::string, int> fd_kinds(pid_t pid);
// Threads of a process (/proc/<pid>/status), -1 when unreadable.
int thread_count(pid_t pid);
// Resident set size in KiB (/proc/<pid>/status VmRSS), -1 when unreadable.
long rss_kib(pid_t pid);

// One gauge that must have a value after the run, on one daemon.
struct GaugeCheck {
  std::string daemon;
  std::string name;
  std::map<std::string, std::string> labels;
  double want = 0;
  double got = -1;  // -1: absent or /metrics did not answer
  bool ok() const { return got == want; }
};

// What the soak test records of one daemon (fds and RSS at idle points of its life).
struct DaemonRecord {
  std::string name;         // server-grpc, server-connect, agent-1, ...
  bool persistent = false;  // never killed: its RSS is compared over the whole run
  int starts = 0;
  pid_t pid = -1;
  int idle_fds = -1;  // after warm-up, or after its last restart (quiet)
  std::map<std::string, int> idle_fd_kinds;
  long idle_rss_kib = -1;  // same moment
  int end_fds = -1;        // after the run and the settle
  long end_rss_kib = -1;
  int idle_threads = -1;
  int end_threads = -1;
  long peak_rss_kib = -1;  // highest sample while the load ran
};

// The soak test's daemons on loopback: a proxy-server with the gRPC frontend and one with the
// HTTP CONNECT frontend (both on unix sockets, --server-count=2), and agents that reach both
// through a TCP balancer over mTLS. server-grpc and agent-1 are never killed.
class SoakFleet {
 public:
  // `log_level`: the daemons' --v (info, debug, trace).
  SoakFleet(const testsupport::TestCerts& certs, int agents, std::string log_level);
  ~SoakFleet();

  std::string grpc_socket() const { return servers_[0]->uds_path(); }
  std::string connect_socket() const { return servers_[1]->uds_path(); }

  // Daemons by index: 0 server-grpc, 1 server-connect, 2.. the agents.
  size_t size() const { return records_.size(); }
  DaemonRecord& record(size_t i) { return records_[i]; }
  bool is_server(size_t i) const { return i < servers_.size(); }

  // SIGKILL daemon i (and reap it).
  void kill(size_t i);
  // Starts daemon i again (same ports for a server, same id for an agent).
  void restart(size_t i);
  // True once every running daemon sees the whole fleet: each server routes to every agent, each
  // agent holds a stream to both servers.
  bool connected() const;
  // True when daemon i carries no tunnel and no pending dial (its gauges).
  bool quiet(size_t i) const { return busy(i).empty(); }
  // What keeps daemon i from being quiet ("established_connections=1, ..."), empty when quiet.
  std::string busy(size_t i) const;
  // Samples fds and RSS of daemon i as its idle point.
  void take_idle(size_t i);
  // Samples RSS of every daemon into peak_rss_kib.
  void sample_peaks();
  // Reads every gauge the end state is checked against (see README.md).
  std::vector<GaugeCheck> end_gauges() const;
  // Sum of a counter over the daemons of one kind (servers or agents), for the report.
  double sum_counter(bool servers, const std::string& name,
                     const std::map<std::string, std::string>& labels = {}) const;
  // Copies every daemon log into `dir`.
  void copy_logs(const std::string& dir) const;
  int agents() const { return static_cast<int>(agents_.size()); }

 private:
  pid_t pid_of(size_t i) const;
  e2e::PromParse metrics_of(size_t i) const;

  const testsupport::TestCerts& certs_;
  std::string log_level_;
  testsupport::TempDir dir_{"konn-soak"};
  testsupport::TcpBalancer balancer_;
  std::vector<std::unique_ptr<e2e::FleetServer>> servers_;
  std::vector<std::unique_ptr<e2e::FleetAgent>> agents_;  // null while killed
  std::vector<std::string> logs_;                         // every log file, for copy_logs
  std::vector<DaemonRecord> records_;
};

}  // namespace konn::soak
