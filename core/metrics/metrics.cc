#include "core/metrics/metrics.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/resource.h>
#include <unistd.h>

#include <prometheus/text_serializer.h>

namespace konn::core::metrics {
namespace {

struct Memory {
  double resident = 0;
  double virtual_size = 0;
};

Memory read_memory() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0;
  long rss = 0;
  statm >> pages >> rss;
  auto page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  return Memory{static_cast<double>(rss) * page, static_cast<double>(pages) * page};
}

double max_fds() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  return static_cast<double>(limit.rlim_cur);
}

double count_fds() {
  std::error_code ec;
  double n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

double cpu_seconds() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  double utime = 0;
  double stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace

Registry::Registry() : registry_(std::make_shared<prometheus::Registry>()) {
  auto gauge = [this](const std::string& name, const std::string& help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(*registry_).Add({});
  };
  // Names, types and help as Prometheus' Go client (process collector) writes them.
  start_time_ =
      gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.");
  resident_bytes_ = gauge("process_resident_memory_bytes", "Resident memory size in bytes.");
  virtual_bytes_ = gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.");
  open_fds_ = gauge("process_open_fds", "Number of open file descriptors.");
  max_fds_ = gauge("process_max_fds", "Maximum number of open file descriptors.");
  cpu_seconds_ = &prometheus::BuildCounter()
                      .Name("process_cpu_seconds_total")
                      .Help("Total user and system CPU time spent in seconds.")
                      .Register(*registry_)
                      .Add({});
  start_time_->Set(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
}

std::string Registry::serialize() {
  {
    std::lock_guard lock(mu_);
    Memory memory = read_memory();
    resident_bytes_->Set(memory.resident);
    virtual_bytes_->Set(memory.virtual_size);
    open_fds_->Set(count_fds());
    max_fds_->Set(max_fds());
    // A counter only grows: add what the kernel counted since the last scrape.
    double now = cpu_seconds();
    if (now > cpu_seen_) {
      cpu_seconds_->Increment(now - cpu_seen_);
      cpu_seen_ = now;
    }
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace konn::core::metrics
