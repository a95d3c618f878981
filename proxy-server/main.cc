// proxy-server: the Konnectivity server (frontend for kube-apiserver, listener for agents).
#include <cstdio>
#include <exception>

#include "core/config/flag_parser.h"
#include "core/io/allocator.h"
#include "core/io/shutdown.h"
#include "core/log/logger.h"
#include "proxy-server/server_app.h"
#include "proxy-server/server_options.h"

int main(int argc, char** argv) {
  konn::core::io::ignore_broken_pipe_signal();
  konn::core::io::tune_allocator_for_relaying();
  konn::server::ServerOptions options;
  konn::core::config::FlagParser parser("proxy-server", "Konnectivity proxy server");
  options.register_flags(parser);
  parser.add_check_config();
  auto parsed = parser.parse(argc, argv);
  if (parsed.exit_now) {
    std::fputs(parsed.output.c_str(), stdout);
    return 0;
  }
  options.apply_environment();
  // A flag that did not parse keeps its default: validating the others then would only add
  // complaints unrelated to the mistake.
  auto errors = parsed.errors;
  if (errors.empty()) {
    errors = options.validate();
    if (!konn::core::log::set_level(options.log_level)) {
      errors.push_back("--v: unknown log level \"" + options.log_level + "\"");
    }
  }
  if (parsed.check_config) return konn::core::config::finish_check_config("proxy-server", errors);
  if (!errors.empty()) return konn::core::config::report_usage_errors("proxy-server", errors);
  if (!options.log_file.empty()) konn::core::log::set_file(options.log_file);
  options.print(*konn::core::log::get("server"));
  try {
    konn::server::ServerApp app(options);
    app.start();
    return app.run();
  } catch (const std::exception& e) {
    konn::core::log::get("server")->critical("{}", e.what());
    return 1;
  }
}
