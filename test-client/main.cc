#include <csignal>
#include <iostream>

#include "core/config/flag_parser.h"
#include "test-client/client_app.h"
#include "test-client/test_client_options.h"

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout is reported, not fatal
  konn::testclient::TestClientOptions options;
  konn::core::config::FlagParser flags(
      "proxy-test-client",
      "Dials a destination through a Konnectivity proxy-server frontend and fetches a page or "
      "pipes stdin/stdout through the tunnel.");
  options.register_flags(flags);
  auto parsed = flags.parse(argc, argv);
  if (parsed.exit_now) {
    std::cout << parsed.output;
    return 0;
  }
  auto errors = parsed.errors;
  for (auto& e : options.validate()) errors.push_back(std::move(e));
  if (!errors.empty()) {
    for (const auto& e : errors) std::cerr << "proxy-test-client: " << e << "\n";
    return 2;
  }
  return konn::testclient::ClientApp(options).run();
}
