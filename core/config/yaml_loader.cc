#include "core/config/yaml_loader.h"

#include <yaml-cpp/yaml.h>

namespace konn::core::config {

std::vector<YamlFlag> load_yaml_flags(std::istream& in) {
  std::vector<YamlFlag> out;
  YAML::Node root;
  try {
    root = YAML::Load(in);
    if (root.IsNull()) return out;
    if (!root.IsMap()) {
      throw YamlFlagError(root.Mark().line + 1,
                          "the top level must be a mapping of flag names to values");
    }
    for (const auto& kv : root) {
      int line = kv.first.Mark().line + 1;
      if (!kv.first.IsScalar()) throw YamlFlagError(line, "a key must be a flag name");
      std::string key = kv.first.as<std::string>();
      if (key.rfind("--", 0) == 0) key.erase(0, 2);
      std::vector<std::string> values;
      const YAML::Node& v = kv.second;
      if (v.IsSequence()) {
        for (const auto& item : v) {
          if (!item.IsScalar()) {
            throw YamlFlagError(item.Mark().line + 1, "key \"" + key + "\" must hold scalars");
          }
          values.push_back(item.as<std::string>());
        }
      } else if (v.IsScalar()) {
        values.push_back(v.as<std::string>());
      } else if (v.IsNull()) {
        values.emplace_back();
      } else {
        throw YamlFlagError(line, "key \"" + key + "\" must be a scalar or a list");
      }
      out.push_back({std::move(key), std::move(values), line});
    }
  } catch (const YAML::Exception& e) {
    throw YamlFlagError(e.mark.is_null() ? 0 : e.mark.line + 1, e.msg);
  }
  return out;
}

}  // namespace konn::core::config
