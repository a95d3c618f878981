#include "core/config/flag_parser.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include <CLI/CLI.hpp>

#include "core/config/daemon_flags.h"
#include "core/config/yaml_loader.h"

namespace konn::core::config {
namespace {

constexpr size_t kHelpWidth = 100;
constexpr size_t kHelpColumn = 36;  // where flag descriptions start

std::string long_name(const std::string& spec) { return spec.substr(0, spec.find(',')); }

std::string short_name(const std::string& spec) {
  auto comma = spec.find(',');
  return comma == std::string::npos ? std::string() : spec.substr(comma + 1);
}

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

std::string parse_double(const std::string& v, double* out) {
  double value = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
  if (ec != std::errc() || ptr != v.data() + v.size() || v.empty() || !std::isfinite(value)) {
    return "invalid number \"" + v + "\"";
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

std::string quoted_default(const std::string& v) { return v.empty() ? v : "\"" + v + "\""; }

// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
// neighbours ("prot" for "port") each count as one edit.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

// CLI11 reads the --config file through this formatter, so file values pass through the same
// per-flag conversion (and error collection) as command-line values. Keys that name no flag are
// kept from CLI11 (which would ignore them) and reported by the parser with their lines.
class FlagParser::YamlConfig : public CLI::Config {
 public:
  explicit YamlConfig(FlagParser* parser) : parser_(parser) {}
  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return {}; }
  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override {
    std::vector<CLI::ConfigItem> out;
    for (auto& flag : load_yaml_flags(in)) {
      if (!parser_->accept_file_key(flag)) continue;
      CLI::ConfigItem item;
      item.name = std::move(flag.key);
      item.inputs = std::move(flag.values);
      out.push_back(std::move(item));
    }
    return out;
  }

 private:
  FlagParser* parser_;
};

FlagParser::FlagParser(std::string program, std::string description)
    : program_(program),
      description_(description),
      app_(std::make_unique<CLI::App>(std::move(description), std::move(program))) {
  app_->config_formatter(std::make_shared<YamlConfig>(this));
  app_->set_config("--config", "", "YAML file whose keys are the long flag names");
  app_->allow_windows_style_options(false);
  // Unknown arguments are collected and reported by parse(), with a suggestion.
  app_->allow_extras(true);
}

FlagParser::~FlagParser() = default;

void FlagParser::add_raw(const std::string& name, const std::string& help,
                         const std::string& value_type, std::string default_text,
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
  if (value_type.empty()) {
    opt->expected(0, 1)->default_str("");
  }
  opt->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  flags_.push_back({long_name(name), short_name(name), value_type, help, std::move(default_text)});
}

void FlagParser::add(const std::string& name, std::string* target, const std::string& help) {
  add_raw(name, help, "string", quoted_default(*target), [target](const std::string& v) {
    *target = v;
    return std::string();
  });
}

void FlagParser::add(const std::string& name, int* target, const std::string& help) {
  add_raw(name, help, "int", *target == 0 ? "" : std::to_string(*target),
          [target](const std::string& v) { return parse_int(v, target); });
}

void FlagParser::add(const std::string& name, int64_t* target, const std::string& help) {
  add_raw(name, help, "int", *target == 0 ? "" : std::to_string(*target),
          [target](const std::string& v) { return parse_int(v, target); });
}

void FlagParser::add(const std::string& name, double* target, const std::string& help) {
  char shown[32] = "";
  if (*target != 0) std::snprintf(shown, sizeof shown, "%g", *target);
  add_raw(name, help, "float32", shown,
          [target](const std::string& v) { return parse_double(v, target); });
}

void FlagParser::add(const std::string& name, bool* target, const std::string& help) {
  add_raw(name, help, "", *target ? "true" : "",
          [target](const std::string& v) { return parse_bool(v, target); });
}

void FlagParser::add(const std::string& name, Duration* target, const std::string& help) {
  add_raw(name, help, "duration", target->count() == 0 ? "" : format_go_duration(*target),
          [target](const std::string& v) {
            auto d = parse_go_duration(v);
            if (!d) return "invalid duration \"" + v + "\" (examples: 500ms, 30s, 1h)";
            *target = *d;
            return std::string();
          });
}

void FlagParser::add(const std::string& name, std::vector<std::string>* target,
                     const std::string& help) {
  std::string joined;
  for (const auto& item : *target) joined += (joined.empty() ? "" : ",") + item;
  auto first = std::make_shared<bool>(true);
  add_raw(name, help, "strings", quoted_default(joined), [target, first](const std::string& v) {
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
  add_raw(name, help + " (accepted for compatibility; no effect)", "", "",
          [](const std::string&) { return std::string(); });
}

void FlagParser::add_custom(const std::string& name,
                            std::function<std::string(const std::string&)> apply,
                            const std::string& help, bool takes_value) {
  add_raw(name, help, takes_value ? "string" : "", "", std::move(apply));
}

void FlagParser::set_default_text(const std::string& name, std::string text) {
  for (auto& f : flags_) {
    if (f.long_name == name) f.default_text = std::move(text);
  }
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

std::vector<std::string> FlagParser::flag_names() const {
  std::vector<std::string> out;
  out.reserve(flags_.size());
  for (const auto& f : flags_) out.push_back(f.long_name);
  return out;
}

std::string FlagParser::unknown_name_error(const std::string& shown, const std::string& name,
                                           const std::string& prefix, bool in_file) const {
  auto owners = daemons_with_flag(program_, name);
  if (!owners.empty()) {
    return shown + " is " + daemon_list_text(owners) + " flag, not a " + program_ + " one";
  }
  std::vector<std::string> candidates = flag_names();
  if (!in_file) candidates.push_back("config");
  std::string near = nearest_name(name, candidates);
  std::string out = (in_file ? "unknown key " : "unknown flag ") + shown;
  if (!near.empty()) out += " (did you mean " + prefix + near + (in_file ? "\"" : "") + "?)";
  return out;
}

bool FlagParser::accept_file_key(const YamlFlag& flag) {
  const std::string& key = flag.key;
  if (key == "config" || key == "help") {
    file_errors_.emplace_back(flag.line, "\"" + key + "\" is only a command-line flag");
    return false;
  }
  // As CLI11 looks a key up: a long name, or a one-letter alias.
  if (app_->get_option_no_throw("--" + key) != nullptr ||
      (key.size() == 1 && app_->get_option_no_throw("-" + key) != nullptr)) {
    return true;
  }
  file_errors_.emplace_back(flag.line, unknown_name_error("\"" + key + "\"", key, "\"", true));
  return false;
}

std::vector<std::string> FlagParser::unknown_argument_errors() const {
  std::vector<std::string> out;
  auto extras = app_->remaining();
  for (size_t i = 0; i < extras.size(); ++i) {
    const std::string& arg = extras[i];
    auto eq = arg.find('=');
    std::string shown = arg.substr(0, eq);
    auto start = shown.find_first_not_of('-');
    if (start == 0 || start == std::string::npos) {
      out.push_back("unexpected argument \"" + arg + "\" (flags are written --name=value)");
      continue;
    }
    std::string name = shown.substr(start);
    out.push_back(unknown_name_error(shown, name, "--", false));
    // `--unknown value`: the value is not a second problem.
    if (eq == std::string::npos && i + 1 < extras.size() && !extras[i + 1].empty() &&
        extras[i + 1][0] != '-') {
      ++i;
    }
  }
  return out;
}

std::string FlagParser::config_path() const {
  auto* opt = app_->get_config_ptr();
  if (opt == nullptr || opt->results().empty()) return "config file";
  return opt->results().back();
}

int finish_check_config(const std::string& program, const std::vector<std::string>& errors) {
  if (errors.empty()) {
    std::fputs("configuration OK\n", stdout);
    return 0;
  }
  return report_usage_errors(program, errors);
}

int report_usage_errors(const std::string& program, const std::vector<std::string>& errors) {
  for (const auto& e : errors) std::fprintf(stderr, "%s: %s\n", program.c_str(), e.c_str());
  return kUsageErrorExit;
}

FlagParser::Result FlagParser::parse(int argc, const char* const* argv) {
  Result result;
  errors_.clear();
  file_errors_.clear();
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
  std::vector<std::string> errors;
  try {
    app_->parse(static_cast<int>(rewritten.size()), rewritten.data());
  } catch (const CLI::CallForHelp&) {
    result.exit_now = true;
    result.output = help();
    return result;
  } catch (const YamlFlagError& e) {
    std::string where = config_path();
    if (e.line() > 0) where += ":" + std::to_string(e.line());
    errors.push_back(where + ": " + e.what());
  } catch (const CLI::ParseError& e) {
    errors.push_back(e.what());
  } catch (const std::exception& e) {
    errors.push_back(e.what());
  }
  // Unknown names first: they explain any other complaint.
  for (auto& e : unknown_argument_errors()) result.errors.push_back(std::move(e));
  std::string path = config_path();
  for (auto& [line, text] : file_errors_) {
    result.errors.push_back(path + ":" + std::to_string(line) + ": " + text);
  }
  for (auto& e : errors) result.errors.push_back(std::move(e));
  for (auto& e : errors_) result.errors.push_back(std::move(e));
  result.check_config = check_config_requested();
  return result;
}

bool FlagParser::was_set(const std::string& name) const {
  auto* opt = app_->get_option_no_throw("--" + long_name(name));
  return opt != nullptr && opt->count() > 0;
}

std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates) {
  // Near enough: one edit in a short name, two in a medium one, three in a long one; a name of
  // one or two letters is too short to guess from.
  if (name.size() <= 2) return {};
  size_t limit = name.size() <= 4 ? 1 : name.size() <= 9 ? 2 : 3;
  std::string best;
  size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    size_t d = edit_distance(name, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string wrap_text(const std::string& text, size_t first_column, size_t indent, size_t width) {
  std::string out;
  size_t column = first_column;
  bool line_empty = true;
  std::istringstream words(text);
  std::string word;
  auto new_line = [&] {
    out += '\n';
    out.append(indent, ' ');
    column = indent;
    line_empty = true;
  };
  while (words >> word) {
    size_t needed = word.size() + (line_empty ? 0 : 1);
    if (column + needed > width && !line_empty) new_line();
    if (!line_empty) {
      out += ' ';
      ++column;
    }
    // A word longer than a whole line is cut.
    while (column + word.size() > width && width > column) {
      out += word.substr(0, width - column);
      word.erase(0, width - column);
      new_line();
    }
    out += word;
    column += word.size();
    line_empty = false;
  }
  return out;
}

std::string FlagParser::help() const {
  std::string out = "Usage: " + program_ + " [flags]\n\n";
  out += wrap_text(description_, 0, 0, kHelpWidth) + "\n\nFlags:\n";
  auto entry = [&out](const std::string& names, const std::string& text) {
    out += names;
    if (names.size() + 2 > kHelpColumn) {
      out += '\n';
      out.append(kHelpColumn, ' ');
    } else {
      out.append(kHelpColumn - names.size(), ' ');
    }
    out += wrap_text(text, kHelpColumn, kHelpColumn, kHelpWidth) + "\n";
  };
  for (const auto& f : flags_) {
    std::string names = f.short_name.empty() ? "      " : "  -" + f.short_name + ", ";
    names += "--" + f.long_name;
    if (!f.value_type.empty()) names += " " + f.value_type;
    std::string text = f.help;
    if (!f.default_text.empty()) text += " (default " + f.default_text + ")";
    entry(names, text);
  }
  entry("      --config string",
        "YAML file whose keys are the long flag names; the command line overrides it. An "
        "unknown key is an error");
  entry("  -h, --help", "Print this help and exit");
  return out;
}

}  // namespace konn::core::config
