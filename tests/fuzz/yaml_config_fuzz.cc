// A daemon's --config file (YAML, keys = long flag names). Operators write it, but it is often
// rendered from templates: malformed input must give an error, never a crash or a hang.

#include <sstream>
#include <stdexcept>
#include <string>

#include "core/config/yaml_loader.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16 * 1024) return 0;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    auto flags = konn::core::config::load_yaml_flags(in);
    // Names go to the flag parser as they are (one leading "--" stripped: "----x" stays "--x" and
    // is an unknown flag there), so the loader's contract is only: a result or its error.
    for (const auto& flag : flags) {
      (void)flag.key;
      (void)flag.values;
    }
  } catch (const std::runtime_error&) {
    // The documented failure: a message with the line number.
  }
  return 0;
}
