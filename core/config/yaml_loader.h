#pragma once

#include <istream>
#include <stdexcept>
#include <string>
#include <vector>

namespace konn::core::config {

// One key of a --config file, with the line it is on (1-based) for error messages.
struct YamlFlag {
  std::string key;
  std::vector<std::string> values;
  int line = 0;
};

// Why a --config file could not be read, and where (line 0: nowhere in particular).
class YamlFlagError : public std::runtime_error {
 public:
  YamlFlagError(int line, const std::string& what) : std::runtime_error(what), line_(line) {}
  int line() const { return line_; }

 private:
  int line_;
};

// Reads a YAML mapping of flag names to values. Scalars become one value; sequences become one
// value per element; a leading "--" on a key is tolerated. Throws YamlFlagError on malformed
// YAML, a top level that is not a mapping, or a nested mapping. Keys are not checked here: the
// flag parser, which knows the flags, reports the unknown ones with their lines.
std::vector<YamlFlag> load_yaml_flags(std::istream& in);

}  // namespace konn::core::config
