#include "core/config/flag_parser.h"

#include <charconv>
#include <cstdio>
#include <limits>
#include <sstream>

#include <CLI/CLI.hpp>

#include "core/config/yaml_loader.h"

namespace konn::core::config {
namespace {

// CLI11 reads the --config file through this formatter, so file values pass through the same
// per-flag conversion (and error collection) as command-line values.
class YamlConfig : public CLI::Config {
 public:
  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return {}; }
  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override {
    std::vector<CLI::ConfigItem> out;
    for (auto& [key, values] : load_yaml_flags(in)) {
      CLI::ConfigItem item;
      item.name = key;
      item.inputs = std::move(values);
      out.push_back(std::move(item));
    }
    return out;
  }
};

std::string long_name(const std::string& spec) { return spec.substr(0, spec.find(',')); }

std::string cli_spec(const std::string& spec) {
  auto comma = spec.find(',');
  if (comma == std::string::npos) return "--" + spec;
  return "--" + spec.substr(0, comma) + ",-" + spec.substr(comma + 1);
}

template <typename Int>
std::string parse_int(const std::string& v, Int* out) {
  Int value{};
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
  if (ec != std::errc() || ptr != v.data() + v.size() || v.empty()) {
    return "invalid integer \"" + v + "\"";
  }
  *out = value;
  return {};
}

std::string parse_bool(const std::string& v, bool* out) {
  if (v.empty() || v == "true" || v == "1" || v == "t" || v == "T" || v == "TRUE" || v == "True") {
    *out = true;
  } else if (v == "false" || v == "0" || v == "f" || v == "F" || v == "FALSE" || v == "False") {
    *out = false;
  } else {
    return "invalid boolean \"" + v + "\" (want true or false)";
  }
  return {};
}

}  // namespace

FlagParser::FlagParser(std::string program, std::string description)
    : app_(std::make_unique<CLI::App>(std::move(description), std::move(program))) {
  app_->config_formatter(std::make_shared<YamlConfig>());
  app_->set_config("--config", "", "YAML file whose keys are the long flag names");
  app_->allow_windows_style_options(false);
}

FlagParser::~FlagParser() = default;

void FlagParser::add_raw(const std::string& name, const std::string& help, bool takes_value,
                         std::function<std::string(const std::string&)> apply) {
  std::string flag = "--" + long_name(name);
  CLI::callback_t callback = [this, flag, apply = std::move(apply)](const CLI::results_t& results) {
    // Lists accept every occurrence; scalars take the last one, as pflag does.
    for (const auto& r : results) {
      std::string err = apply(r);
      if (!err.empty()) errors_.push_back(flag + ": " + err);
    }
    if (results.empty()) {
      std::string err = apply("");
      if (!err.empty()) errors_.push_back(flag + ": " + err);
    }
    return true;
  };
  auto* opt = app_->add_option(cli_spec(name), callback, help);
  if (!takes_value) {
    opt->expected(0, 1)->default_str("");
  }
  opt->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void FlagParser::add(const std::string& name, std::string* target, const std::string& help) {
  add_raw(name, help + " (default \"" + *target + "\")", true, [target](const std::string& v) {
    *target = v;
    return std::string();
  });
}

void FlagParser::add(const std::string& name, int* target, const std::string& help) {
  add_raw(name, help + " (default " + std::to_string(*target) + ")", true,
          [target](const std::string& v) { return parse_int(v, target); });
}

void FlagParser::add(const std::string& name, int64_t* target, const std::string& help) {
  add_raw(name, help + " (default " + std::to_string(*target) + ")", true,
          [target](const std::string& v) { return parse_int(v, target); });
}

void FlagParser::add(const std::string& name, bool* target, const std::string& help) {
  add_raw(name, help + (*target ? " (default true)" : " (default false)"), false,
          [target](const std::string& v) { return parse_bool(v, target); });
}

void FlagParser::add(const std::string& name, Duration* target, const std::string& help) {
  add_raw(name, help + " (default " + format_go_duration(*target) + ")", true,
          [target](const std::string& v) {
            auto d = parse_go_duration(v);
            if (!d) return "invalid duration \"" + v + "\" (examples: 500ms, 30s, 1h)";
            *target = *d;
            return std::string();
          });
}

void FlagParser::add(const std::string& name, std::vector<std::string>* target,
                     const std::string& help) {
  auto first = std::make_shared<bool>(true);
  add_raw(name, help, true, [target, first](const std::string& v) {
    if (*first) {  // a given value replaces the default list
      target->clear();
      *first = false;
    }
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (!item.empty()) target->push_back(item);
    }
    return std::string();
  });
}

void FlagParser::add_ignored(const std::string& name, const std::string& help) {
  add_raw(name, help + " (accepted for compatibility; no effect)", false,
          [](const std::string&) { return std::string(); });
}

void FlagParser::add_custom(const std::string& name,
                            std::function<std::string(const std::string&)> apply,
                            const std::string& help, bool takes_value) {
  add_raw(name, help, takes_value, std::move(apply));
}

void FlagParser::add_check_config() {
  add("check-config", &check_config_,
      "Validate the flags and the --config file, print \"configuration OK\" (exit 0) or every "
      "error (exit 2), and exit. Checks values only: files the options name (certificates, keys, "
      "kubeconfig, token, users file) are not opened and nothing is bound");
}

bool FlagParser::check_config_requested() const {
  // Read from the raw results too: when parsing stops early (an unreadable --config file) the
  // flag's callback has not run, yet the caller asked for a check and expects its exit status.
  auto* opt = app_->get_option_no_throw("--check-config");
  if (opt == nullptr || opt->count() == 0) return false;
  bool value = true;
  const auto& raw = opt->results();
  if (!raw.empty() && !parse_bool(raw.back(), &value).empty()) return true;
  return value;
}

int finish_check_config(const std::string& program, const std::vector<std::string>& errors) {
  if (errors.empty()) {
    std::fputs("configuration OK\n", stdout);
    return 0;
  }
  for (const auto& e : errors) std::fprintf(stderr, "%s: %s\n", program.c_str(), e.c_str());
  return 2;
}

FlagParser::Result FlagParser::parse(int argc, const char* const* argv) {
  Result result;
  errors_.clear();
  // `--name=` sets an empty value, as pflag does; CLI11 would instead take the next argument as
  // the value (`--cluster-ca-cert= --agent-namespace=x` would lose the second flag). Passing the
  // empty value as its own argument keeps them apart.
  std::vector<std::string> args;
  args.reserve(static_cast<size_t>(argc) + 1);
  for (int i = 0; i < argc; ++i) {
    std::string_view a = argv[i];
    if (i > 0 && a.size() > 3 && a.rfind("--", 0) == 0 && a.find('=') == a.size() - 1) {
      args.emplace_back(a.substr(0, a.size() - 1));
      args.emplace_back();
    } else {
      args.emplace_back(a);
    }
  }
  std::vector<const char*> rewritten;
  rewritten.reserve(args.size());
  for (const auto& a : args) rewritten.push_back(a.c_str());
  try {
    app_->parse(static_cast<int>(rewritten.size()), rewritten.data());
  } catch (const CLI::CallForHelp&) {
    result.exit_now = true;
    result.output = app_->help();
    return result;
  } catch (const CLI::ExtrasError& e) {
    errors_.push_back(std::string("unknown flag or argument: ") + e.what());
  } catch (const CLI::ParseError& e) {
    errors_.push_back(e.what());
  } catch (const std::exception& e) {
    errors_.push_back(e.what());
  }
  result.errors = errors_;
  result.check_config = check_config_requested();
  return result;
}

bool FlagParser::was_set(const std::string& name) const {
  auto* opt = app_->get_option_no_throw("--" + long_name(name));
  return opt != nullptr && opt->count() > 0;
}

}  // namespace konn::core::config
