#include "core/config/yaml_loader.h"

#include <stdexcept>

#include <yaml-cpp/yaml.h>

namespace konn::core::config {

std::vector<std::pair<std::string, std::vector<std::string>>> load_yaml_flags(std::istream& in) {
  YAML::Node root;
  try {
    root = YAML::Load(in);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error("config file: " + std::string(e.what()));
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  if (root.IsNull()) return out;
  if (!root.IsMap()) throw std::runtime_error("config file: top level must be a mapping");
  for (const auto& kv : root) {
    std::string key = kv.first.as<std::string>();
    if (key.rfind("--", 0) == 0) key.erase(0, 2);
    std::vector<std::string> values;
    const YAML::Node& v = kv.second;
    if (v.IsSequence()) {
      for (const auto& item : v) {
        if (!item.IsScalar()) {
          throw std::runtime_error("config file: key '" + key + "' must hold scalars (line " +
                                   std::to_string(item.Mark().line + 1) + ")");
        }
        values.push_back(item.as<std::string>());
      }
    } else if (v.IsScalar()) {
      values.push_back(v.as<std::string>());
    } else if (v.IsNull()) {
      values.emplace_back();
    } else {
      throw std::runtime_error("config file: key '" + key + "' must be a scalar or a list (line " +
                               std::to_string(v.Mark().line + 1) + ")");
    }
    out.emplace_back(std::move(key), std::move(values));
  }
  return out;
}

}  // namespace konn::core::config
