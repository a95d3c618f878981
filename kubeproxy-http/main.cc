// kubeproxy-http: `kubectl proxy` compatible API proxy, or (--mode=connect) an HTTP CONNECT
// forward proxy for kubectl. Options -> KubeproxyApp -> run.
#include <iostream>

#include "core/config/flag_parser.h"
#include "core/io/allocator.h"
#include "core/io/shutdown.h"
#include "core/log/logger.h"
#include "kubeproxy-http/kubeproxy_app.h"
#include "kubeproxy-http/kubeproxy_options.h"

int main(int argc, char** argv) {
  konn::core::io::ignore_broken_pipe_signal();
  konn::core::io::tune_allocator_for_relaying();
  konn::kubeproxy::KubeproxyOptions options;
  konn::core::config::FlagParser flags(
      "kubeproxy-http",
      "Creates a proxy server or application-level gateway between localhost and "
      "the Kubernetes API server (kubectl proxy compatible).");
  options.register_flags(flags);
  flags.add_check_config();
  auto parsed = flags.parse(argc, argv);
  if (parsed.exit_now) {
    std::cout << parsed.output;
    return 0;
  }
  options.health_port_set = flags.was_set("health-port");
  // A flag that did not parse keeps its default: validating the others then would only add
  // complaints unrelated to the mistake.
  auto errors = parsed.errors;
  if (errors.empty()) {
    errors = options.validate(flags.was_set("port"));
    if (!konn::core::log::set_level(options.log_level)) {
      errors.push_back("--log-level: unknown level \"" + options.log_level + "\"");
    }
  }
  if (parsed.check_config) return konn::core::config::finish_check_config("kubeproxy-http", errors);
  if (!errors.empty()) return konn::core::config::report_usage_errors("kubeproxy-http", errors);
  options.print(*konn::core::log::get("kubeproxy"));
  try {
    konn::kubeproxy::KubeproxyApp app(options);
    return app.run();
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
