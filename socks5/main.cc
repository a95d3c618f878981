// socks5: a SOCKS5 server (RFC 1928/1929) for reaching private apiservers. See README.md.
#include <cstdio>
#include <exception>

#include "core/config/flag_parser.h"
#include "core/io/allocator.h"
#include "core/io/shutdown.h"
#include "core/log/logger.h"
#include "socks5/socks5_app.h"
#include "socks5/socks5_options.h"

int main(int argc, char** argv) {
  konn::core::io::ignore_broken_pipe_signal();
  konn::core::io::tune_allocator_for_relaying();
  konn::socks5::Socks5Options options;
  konn::core::config::FlagParser parser("socks5", "SOCKS5 server (CONNECT, BIND, UDP ASSOCIATE)");
  options.register_flags(parser);
  parser.add_check_config();
  auto parsed = parser.parse(argc, argv);
  if (parsed.exit_now) {
    std::printf("%s", parsed.output.c_str());
    return 0;
  }
  options.health_port_set = parser.was_set("health-port");
  // A flag that did not parse keeps its default: validating the others then would only add
  // complaints unrelated to the mistake.
  auto errors = parsed.errors;
  if (errors.empty()) {
    errors = options.validate();
    if (!konn::core::log::set_level(options.log_level)) {
      errors.push_back("--log-level: unknown level \"" + options.log_level + "\"");
    }
  }
  if (parsed.check_config) return konn::core::config::finish_check_config("socks5", errors);
  if (!errors.empty()) return konn::core::config::report_usage_errors("socks5", errors);
  if (!options.log_file.empty()) konn::core::log::set_file(options.log_file);
  try {
    options.print(*konn::core::log::get("socks5"));
    konn::socks5::Socks5App app(options);
    return app.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "socks5: %s\n", e.what());
    return 1;
  }
}
