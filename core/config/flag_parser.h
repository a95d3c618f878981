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

// Command-line flags in the style of the Go daemons we replace (pflag): `--name=value`,
// `--name value`, booleans as `--name`, `--name=true`, `--name=false`. Backed by CLI11.
//
// An optional YAML file (`--config=path`) whose keys are the long flag names supplies values too;
// precedence is defaults < file < command line.
//
// Conversion errors do not stop parsing: parse() returns every problem at once, each naming its
// flag, so an operator fixes a manifest in one round.
class FlagParser {
 public:
  FlagParser(std::string program, std::string description);
  ~FlagParser();
  FlagParser(const FlagParser&) = delete;
  FlagParser& operator=(const FlagParser&) = delete;

  // Registers `--name`; `target` holds the default and receives the value. `name` may carry a
  // one-letter alias as "port,p" (giving -p).
  void add(const std::string& name, std::string* target, const std::string& help);
  void add(const std::string& name, int* target, const std::string& help);
  void add(const std::string& name, int64_t* target, const std::string& help);
  void add(const std::string& name, bool* target, const std::string& help);
  void add(const std::string& name, Duration* target, const std::string& help);
  // Comma-separated and/or repeated.
  void add(const std::string& name, std::vector<std::string>* target, const std::string& help);
  // A flag accepted for compatibility whose value is ignored (logged by the caller if it wants).
  void add_ignored(const std::string& name, const std::string& help);
  // A flag whose value goes to `apply`, which returns an error text or "" when fine.
  void add_custom(const std::string& name, std::function<std::string(const std::string&)> apply,
                  const std::string& help, bool takes_value = true);

  // Adds `--check-config`: the daemon validates its flags, values and --config file, prints the
  // outcome and exits, binding nothing and opening none of the files the options name (so a
  // manifest can be checked where its certificate paths do not exist). The daemon's main ends
  // the run with finish_check_config() once its own validation has run.
  void add_check_config();

  struct Result {
    bool exit_now = false;            // --help was given: print `output` and exit 0
    bool check_config = false;        // --check-config was given: see finish_check_config()
    std::vector<std::string> errors;  // every problem found, each naming its flag
    std::string output;               // help text
  };
  Result parse(int argc, const char* const* argv);

  // Which flags were given (command line or file).
  bool was_set(const std::string& name) const;

 private:
  void add_raw(const std::string& name, const std::string& help, bool takes_value,
               std::function<std::string(const std::string&)> apply);

  bool check_config_requested() const;

  std::unique_ptr<CLI::App> app_;
  std::vector<std::string> errors_;
  bool check_config_ = false;
};

// Ends a `--check-config` run: prints "configuration OK" on stdout and returns 0, or prints each
// error as "<program>: <error>" on stderr and returns 2 (the exit status main() should return).
int finish_check_config(const std::string& program, const std::vector<std::string>& errors);

}  // namespace konn::core::config
