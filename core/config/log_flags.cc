#include "core/config/log_flags.h"

namespace konn::core::config {

const std::vector<std::string_view>& log_flag_names() {
  static const std::vector<std::string_view> names = {"v",
                                                      "log-file",
                                                      "logtostderr",
                                                      "alsologtostderr",
                                                      "log-dir",
                                                      "log-file-max-size",
                                                      "skip-headers",
                                                      "skip-log-headers",
                                                      "add-dir-header",
                                                      "one-output",
                                                      "stderrthreshold",
                                                      "vmodule",
                                                      "log-backtrace-at",
                                                      "alsologtostderrthreshold",
                                                      "legacy-stderr-threshold-behavior",
                                                      "log-flush-frequency"};
  return names;
}

void register_log_flags(FlagParser& p, std::string* level, std::string* file) {
  p.add("v", level, "Log verbosity: klog level (0-10) or trace/debug/info/warn/error");
  p.add("log-file", file, "Write logs to this file instead of stderr");
  const auto& names = log_flag_names();
  for (size_t i = 2; i < names.size(); ++i) p.add_ignored(std::string(names[i]), "klog flag");
}

}  // namespace konn::core::config
