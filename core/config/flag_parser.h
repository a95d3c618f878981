#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config/duration.h"

namespace CLI {
class App;
}

namespace konn::core::config {

struct YamlFlag;

// The exit status of every usage error, in every daemon, with or without --check-config: an
// unknown flag or --config key, a value that does not parse, a value the daemon's validation
// refuses. (A failure after start-up, such as a port that cannot be bound, exits 1.)
inline constexpr int kUsageErrorExit = 2;

// Command-line flags in the style of the Go daemons we replace (pflag): `--name=value`,
// `--name value`, booleans as `--name`, `--name=true`, `--name=false`. Backed by CLI11.
//
// An optional YAML file (`--config=path`) whose keys are the long flag names supplies values too;
// precedence is defaults < file < command line.
//
// Conversion errors do not stop parsing: parse() returns every problem at once, each naming its
// flag, so an operator fixes a manifest in one round. An unknown flag or file key is an error
// that names the nearest flag ("did you mean"), or the konn daemon it belongs to when it is
// another daemon's (see daemon_flags.h); file errors name the file and the line.
class FlagParser {
 public:
  // `program` is the daemon's name as in daemon_flags.h (it decides which flags are "another
  // daemon's") and the name --help shows.
  FlagParser(std::string program, std::string description);
  ~FlagParser();
  FlagParser(const FlagParser&) = delete;
  FlagParser& operator=(const FlagParser&) = delete;

  // Registers `--name`; `target` holds the default and receives the value. `name` may carry a
  // one-letter alias as "port,p" (giving -p). --help shows the default unless it is the zero
  // value (empty, 0, false, 0s, no items), as pflag does; the help text must not repeat it.
  void add(const std::string& name, std::string* target, const std::string& help);
  void add(const std::string& name, int* target, const std::string& help);
  void add(const std::string& name, int64_t* target, const std::string& help);
  // A decimal number ("2.5", "-1"), shown as pflag's "float32".
  void add(const std::string& name, double* target, const std::string& help);
  void add(const std::string& name, bool* target, const std::string& help);
  void add(const std::string& name, Duration* target, const std::string& help);
  // Comma-separated and/or repeated.
  void add(const std::string& name, std::vector<std::string>* target, const std::string& help);
  // A flag accepted for compatibility whose value is ignored (logged by the caller if it wants).
  void add_ignored(const std::string& name, const std::string& help);
  // A flag whose value goes to `apply`, which returns an error text or "" when fine.
  void add_custom(const std::string& name, std::function<std::string(const std::string&)> apply,
                  const std::string& help, bool takes_value = true);
  // Replaces the default --help shows for `name` (a long name already added) with `text`, for a
  // default decided at run time ("$PROXY_SERVER_ID or a UUID"); "" shows none.
  void set_default_text(const std::string& name, std::string text);

  // Adds `--check-config`: the daemon validates its flags, values and --config file, prints the
  // outcome and exits, binding nothing and opening none of the files the options name (so a
  // manifest can be checked where its certificate paths do not exist). The daemon's main ends
  // the run with finish_check_config() once its own validation has run.
  void add_check_config();

  struct Result {
    bool exit_now = false;            // --help was given: print `output` and exit 0
    bool check_config = false;        // --check-config was given: see finish_check_config()
    std::vector<std::string> errors;  // every problem found, each naming its flag or file key;
                                      // unknown flags and keys first
    std::string output;               // help text
  };
  Result parse(int argc, const char* const* argv);

  // Which flags were given (command line or file).
  bool was_set(const std::string& name) const;

  // The long names of the flags added, in order (--config and --help aside).
  std::vector<std::string> flag_names() const;

  // The --help text: usage, description, then every flag with its value type, its help and its
  // default, wrapped at 100 columns.
  std::string help() const;

 private:
  struct Flag {
    std::string long_name;
    std::string short_name;  // one letter or empty
    std::string value_type;  // "string", "int", "duration", "strings"; empty for a boolean
    std::string help;
    std::string default_text;
  };
  class YamlConfig;

  void add_raw(const std::string& name, const std::string& help, const std::string& value_type,
               std::string default_text, std::function<std::string(const std::string&)> apply);
  // Whether a --config key names one of our flags; records the error otherwise.
  bool accept_file_key(const YamlFlag& flag);
  std::string unknown_name_error(const std::string& shown, const std::string& name,
                                 const std::string& prefix, bool in_file) const;
  std::vector<std::string> unknown_argument_errors() const;
  std::string config_path() const;

  bool check_config_requested() const;

  std::string program_;
  std::string description_;
  std::unique_ptr<CLI::App> app_;
  std::vector<Flag> flags_;
  std::vector<std::string> errors_;
  std::vector<std::pair<int, std::string>> file_errors_;  // line, text (the path added later)
  bool check_config_ = false;
};

// Ends a `--check-config` run: prints "configuration OK" on stdout and returns 0, or prints each
// error as "<program>: <error>" on stderr and returns kUsageErrorExit (the exit status main()
// should return).
int finish_check_config(const std::string& program, const std::vector<std::string>& errors);

// Prints each error as "<program>: <error>" on stderr and returns kUsageErrorExit.
int report_usage_errors(const std::string& program, const std::vector<std::string>& errors);

// The nearest of `candidates` to `name` (edit distance, a swap of two neighbours counting as
// one edit) when it is near enough to be a typo of it, else "".
std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates);

// `text` split into lines of at most `width` columns at spaces (a longer word is cut), each line
// after the first starting with `indent` spaces. `first_column` is where the first line starts.
std::string wrap_text(const std::string& text, size_t first_column, size_t indent, size_t width);

}  // namespace konn::core::config
