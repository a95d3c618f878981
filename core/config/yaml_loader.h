#pragma once

#include <istream>
#include <string>
#include <utility>
#include <vector>

namespace konn::core::config {

// Reads a YAML mapping of flag names to values. Scalars become one value; sequences become one
// value per element; a leading "--" on a key is tolerated. Throws std::runtime_error with the line
// number on malformed YAML or a nested mapping.
std::vector<std::pair<std::string, std::vector<std::string>>> load_yaml_flags(std::istream& in);

}  // namespace konn::core::config
