// proxy-agent: the node side of the Konnectivity tunnel. Flags as upstream ANP's agent.
#include <iostream>

#include "core/config/flag_parser.h"
#include "core/io/allocator.h"
#include "core/io/shutdown.h"
#include "core/log/logger.h"
#include "proxy-agent/agent_app.h"
#include "proxy-agent/agent_options.h"

int main(int argc, char** argv) {
  konn::core::io::ignore_broken_pipe_signal();
  konn::core::io::tune_allocator_for_relaying();
  konn::agent::AgentOptions options;
  konn::core::config::FlagParser parser(
      "proxy-agent", "Konnectivity proxy-agent: dials endpoints for the proxy-server");
  options.register_flags(parser);
  parser.add_check_config();
  auto parsed = parser.parse(argc, argv);
  if (parsed.exit_now) {
    std::cout << parsed.output;
    return 0;
  }
  options.apply_environment();
  // A flag that did not parse keeps its default: validating the others then would only add
  // complaints unrelated to the mistake.
  auto errors = parsed.errors;
  if (errors.empty()) errors = options.validate();
  if (parsed.check_config) return konn::core::config::finish_check_config("proxy-agent", errors);
  if (!errors.empty()) return konn::core::config::report_usage_errors("proxy-agent", errors);
  if (!options.log_file.empty()) konn::core::log::set_file(options.log_file);
  konn::core::log::set_level(options.log_level);
  options.print(*konn::core::log::get("agent"));
  konn::agent::AgentApp app(options);
  return app.run();
}
