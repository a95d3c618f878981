#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace konn::core::config {

// The long flag names of each konn daemon (proxy-server, proxy-agent, socks5, kubeproxy-http),
// so that one daemon can say that a flag or --config key it does not know belongs to another
// ("--agent-port is a proxy-server flag, not a socks5 one"): the usual mistake is one daemon's
// file or command line given to another. Kept by hand; each daemon's options test checks that
// its entry is exactly what it registers, so the table cannot drift. --config, --help and
// --check-config are every daemon's and are not listed.
struct DaemonFlags {
  std::string_view daemon;
  std::vector<std::string_view> flags;
};
const std::vector<DaemonFlags>& daemon_flag_table();

// The daemons other than `self` that have the long flag `name`, in table order.
std::vector<std::string_view> daemons_with_flag(std::string_view self, std::string_view name);

// "a proxy-server", "a proxy-server and proxy-agent" (for a message such as "--x is a
// proxy-server flag"); empty when `daemons` is.
std::string daemon_list_text(const std::vector<std::string_view>& daemons);

}  // namespace konn::core::config
