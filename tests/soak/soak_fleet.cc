#include "tests/soak/soak_fleet.h"

#include <csignal>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace konn::soak {

int count_fds(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n;
}

std::map<std::string, int> fd_kinds(pid_t pid) {
  std::map<std::string, int> kinds;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (ec) continue;
    if (target.rfind("socket:", 0) == 0) target = "socket";
    if (target.rfind("pipe:", 0) == 0) target = "pipe";
    ++kinds[target];
  }
  return kinds;
}

namespace {

long status_field(pid_t pid, const std::string& name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) == 0) {
      std::istringstream fields(line.substr(name.size()));
      long value = -1;
      fields >> value;
      return value;
    }
  }
  return -1;
}

}  // namespace

long rss_kib(pid_t pid) { return status_field(pid, "VmRSS:"); }

int thread_count(pid_t pid) { return static_cast<int>(status_field(pid, "Threads:")); }

namespace {

const std::string kServerPrefix = "konnectivity_network_proxy_server_";
const std::string kAgentPrefix = "konnectivity_network_proxy_agent_";

std::vector<std::string> server_args(bool connect_mode, const std::string& log_level) {
  std::vector<std::string> args{"--server-count=2", "--v=" + log_level};
  if (connect_mode) args.emplace_back("--mode=http-connect");
  return args;
}

}  // namespace

SoakFleet::SoakFleet(const testsupport::TestCerts& certs, int agents, std::string log_level)
    : certs_(certs), log_level_(std::move(log_level)) {
  for (int s = 0; s < 2; ++s) {
    const char* name = s == 0 ? "server-grpc" : "server-connect";
    servers_.push_back(
        std::make_unique<e2e::FleetServer>(certs_, name, server_args(s == 1, log_level_)));
    servers_.back()->start();
    logs_.push_back(servers_.back()->process().log_path());
    DaemonRecord r;
    r.name = name;
    r.persistent = s == 0;
    r.starts = 1;
    r.pid = servers_.back()->process().pid();
    records_.push_back(r);
  }
  balancer_.set_backends({servers_[0]->agent_port(), servers_[1]->agent_port()});
  for (int a = 1; a <= agents; ++a) {
    const std::string id = "agent-" + std::to_string(a);
    agents_.push_back(std::make_unique<e2e::FleetAgent>(
        dir_, certs_, id, balancer_.port(), std::vector<std::string>{"--v=" + log_level_}));
    logs_.push_back(agents_.back()->process().log_path());
    DaemonRecord r;
    r.name = id;
    r.persistent = a == 1;
    r.starts = 1;
    r.pid = agents_.back()->process().pid();
    records_.push_back(r);
  }
}

SoakFleet::~SoakFleet() = default;

pid_t SoakFleet::pid_of(size_t i) const { return records_[i].pid; }

e2e::PromParse SoakFleet::metrics_of(size_t i) const {
  if (is_server(i)) return servers_[i]->metrics();
  const auto& a = agents_[i - servers_.size()];
  if (!a) {
    e2e::PromParse p;
    p.errors.emplace_back("not running");
    return p;
  }
  return a->metrics();
}

void SoakFleet::kill(size_t i) {
  if (is_server(i)) {
    servers_[i]->kill();
  } else {
    auto& a = agents_[i - servers_.size()];
    a->process().kill(SIGKILL);
    a->process().wait_exit(std::chrono::seconds(10));
  }
}

void SoakFleet::restart(size_t i) {
  DaemonRecord& r = records_[i];
  if (is_server(i)) {
    servers_[i]->start();
    logs_.push_back(servers_[i]->process().log_path());
    r.pid = servers_[i]->process().pid();
  } else {
    auto& a = agents_[i - servers_.size()];
    const std::string id = a->id();
    a.reset();
    a = std::make_unique<e2e::FleetAgent>(dir_, certs_, id, balancer_.port(),
                                          std::vector<std::string>{"--v=" + log_level_});
    logs_.push_back(a->process().log_path());
    r.pid = a->process().pid();
  }
  ++r.starts;
  r.idle_fds = -1;
  r.idle_rss_kib = -1;
}

bool SoakFleet::connected() const {
  const double agents = static_cast<double>(agents_.size());
  for (size_t s = 0; s < servers_.size(); ++s) {
    auto m = metrics_of(s);
    if (m.value(kServerPrefix + "ready_backends", {{"proxy_strategy", "default"}}) != agents ||
        m.value(kServerPrefix + "grpc_connections", {{"service_method", "Connect"}}) != agents) {
      return false;
    }
  }
  for (size_t i = servers_.size(); i < records_.size(); ++i) {
    if (metrics_of(i).value(kAgentPrefix + "open_server_connections") != 2.0) return false;
  }
  return true;
}

std::string SoakFleet::busy(size_t i) const {
  auto m = metrics_of(i);
  if (!m.errors.empty()) return "/metrics: " + m.errors.front();
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> gauges;
  if (is_server(i)) {
    gauges = {{kServerPrefix + "pending_backend_dials", {}},
              {kServerPrefix + "established_connections", {}},
              {kServerPrefix + "grpc_connections", {{"service_method", "Proxy"}}},
              {kServerPrefix + "http_connections", {}}};
  } else {
    gauges = {{kAgentPrefix + "open_endpoint_connections", {}}};
  }
  std::string out;
  for (const auto& [name, labels] : gauges) {
    const double v = m.value(name, labels).value_or(-1);
    if (v != 0) {
      out += (out.empty() ? "" : ", ") + name + (labels.empty() ? "" : "{...}") + "=" +
             std::to_string(static_cast<long long>(v));
    }
  }
  return out;
}

void SoakFleet::take_idle(size_t i) {
  records_[i].idle_fds = count_fds(pid_of(i));
  records_[i].idle_rss_kib = rss_kib(pid_of(i));
  records_[i].idle_threads = thread_count(pid_of(i));
  records_[i].idle_fd_kinds = fd_kinds(pid_of(i));
}

void SoakFleet::sample_peaks() {
  for (auto& r : records_) {
    long rss = rss_kib(r.pid);
    if (rss > r.peak_rss_kib) r.peak_rss_kib = rss;
  }
}

std::vector<GaugeCheck> SoakFleet::end_gauges() const {
  const double agents = static_cast<double>(agents_.size());
  std::vector<GaugeCheck> checks;
  for (size_t s = 0; s < servers_.size(); ++s) {
    const std::string& d = records_[s].name;
    checks.push_back({d, kServerPrefix + "pending_backend_dials", {}, 0});
    checks.push_back({d, kServerPrefix + "established_connections", {}, 0});
    checks.push_back({d, kServerPrefix + "grpc_connections", {{"service_method", "Proxy"}}, 0});
    checks.push_back({d, kServerPrefix + "http_connections", {}, 0});
    checks.push_back(
        {d, kServerPrefix + "full_receive_channels", {{"service_method", "Proxy"}}, 0});
    checks.push_back(
        {d, kServerPrefix + "full_receive_channels", {{"service_method", "Connect"}}, 0});
    // One agent stream per agent, none left over from a killed agent.
    checks.push_back(
        {d, kServerPrefix + "grpc_connections", {{"service_method", "Connect"}}, agents});
    checks.push_back(
        {d, kServerPrefix + "ready_backends", {{"proxy_strategy", "default"}}, agents});
  }
  for (size_t i = servers_.size(); i < records_.size(); ++i) {
    const std::string& d = records_[i].name;
    checks.push_back({d, kAgentPrefix + "open_endpoint_connections", {}, 0});
    checks.push_back({d, kAgentPrefix + "open_server_connections", {}, 2});
  }
  std::map<std::string, e2e::PromParse> scraped;
  for (size_t i = 0; i < records_.size(); ++i) scraped[records_[i].name] = metrics_of(i);
  for (auto& c : checks) {
    const auto& m = scraped[c.daemon];
    c.got = m.errors.empty() ? m.value(c.name, c.labels).value_or(-1) : -1;
  }
  return checks;
}

double SoakFleet::sum_counter(bool servers, const std::string& name,
                              const std::map<std::string, std::string>& labels) const {
  double sum = 0;
  for (size_t i = 0; i < records_.size(); ++i) {
    if (is_server(i) != servers) continue;
    sum += metrics_of(i).value(name, labels).value_or(0);
  }
  return sum;
}

void SoakFleet::copy_logs(const std::string& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  for (const auto& log : logs_) {
    std::filesystem::copy_file(log, dir + "/" + std::filesystem::path(log).filename().string(),
                               std::filesystem::copy_options::overwrite_existing, ec);
  }
}

}  // namespace konn::soak
