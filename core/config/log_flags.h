#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/config/flag_parser.h"

namespace konn::core::config {

// The klog flags that upstream Go daemons take and their manifests pass. `--v` (a klog
// verbosity 0-10, or a level name) goes to `level` and `--log-file` to `file`; the others
// (`--logtostderr`, `--log-dir`, `--vmodule`, ...) are accepted and have no effect, on the
// command line and in a --config file alike.
void register_log_flags(FlagParser& parser, std::string* level, std::string* file);

// The names register_log_flags() registers, `v` and `log-file` first.
const std::vector<std::string_view>& log_flag_names();

}  // namespace konn::core::config
