#include "core/config/log_flags.h"

namespace konn::core::config {

void register_log_flags(FlagParser& p, std::string* level, std::string* file) {
  p.add("v", level, "Log verbosity: klog level (0-10) or trace/debug/info/warn/error");
  p.add("log-file", file, "Write logs to this file instead of stderr");
  for (const char* name :
       {"logtostderr", "alsologtostderr", "log-dir", "log-file-max-size", "skip-headers",
        "skip-log-headers", "add-dir-header", "one-output", "stderrthreshold", "vmodule",
        "log-backtrace-at", "alsologtostderrthreshold", "legacy-stderr-threshold-behavior",
        "log-flush-frequency"}) {
    p.add_ignored(name, "klog flag");
  }
}

}  // namespace konn::core::config
