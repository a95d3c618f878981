#include "core/metrics/metrics.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <prometheus/text_serializer.h>

namespace konn::core::metrics {
namespace {

double read_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0;
  long rss = 0;
  statm >> pages >> rss;
  return static_cast<double>(rss) * static_cast<double>(::sysconf(_SC_PAGESIZE));
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
  start_time_ = gauge("process_start_time_seconds", "Start time of the process since unix epoch.");
  resident_bytes_ = gauge("process_resident_memory_bytes", "Resident memory size in bytes.");
  open_fds_ = gauge("process_open_fds", "Number of open file descriptors.");
  cpu_seconds_ = gauge("process_cpu_seconds_total", "Total user and system CPU time in seconds.");
  start_time_->Set(std::chrono::duration<double>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count());
}

std::string Registry::serialize() {
  resident_bytes_->Set(read_rss_bytes());
  open_fds_->Set(count_fds());
  cpu_seconds_->Set(cpu_seconds());
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace konn::core::metrics
