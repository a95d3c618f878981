#pragma once

#include <string>

#include "core/config/flag_parser.h"

namespace konn::core::config {

// The klog flags that upstream Go daemons take and their manifests pass. `--v` (a klog
// verbosity 0-10, or a level name) goes to `level` and `--log-file` to `file`; the others
// (`--logtostderr`, `--log-dir`, `--vmodule`, ...) are accepted and have no effect.
void register_log_flags(FlagParser& parser, std::string* level, std::string* file);

}  // namespace konn::core::config
