#include "core/config/flag_parser.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <catch2/catch.hpp>

#include "core/config/daemon_flags.h"
#include "core/config/log_flags.h"

using namespace std::chrono_literals;
using konn::core::config::Duration;
using konn::core::config::FlagParser;

namespace {

struct Opts {
  std::string mode = "grpc";
  int port = 8090;
  bool del = true;
  Duration keepalive = 1h;
  std::vector<std::string> strategies{"default"};
};

FlagParser::Result run(Opts& o, std::vector<std::string> args) {
  FlagParser p("prog", "test");
  p.add("mode", &o.mode, "mode");
  p.add("server-port,p", &o.port, "port");
  p.add("delete-existing-uds-file", &o.del, "delete");
  p.add("keepalive-time", &o.keepalive, "keepalive");
  p.add("proxy-strategies", &o.strategies, "strategies");
  p.add_ignored("warn-on-channel-limit", "deprecated");
  std::vector<const char*> argv{"prog"};
  for (auto& a : args) argv.push_back(a.c_str());
  return p.parse(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST_CASE("defaults stay when no flag is given", "[config]") {
  Opts o;
  auto r = run(o, {});
  CHECK(r.errors.empty());
  CHECK(o.mode == "grpc");
  CHECK(o.port == 8090);
  CHECK(o.del);
  CHECK(o.keepalive == 1h);
}

TEST_CASE("pflag-style values are accepted", "[config]") {
  Opts o;
  auto r = run(o, {"--mode=http-connect", "--server-port", "0", "--delete-existing-uds-file=false",
                   "--keepalive-time=30s", "--proxy-strategies=destHost,default",
                   "--warn-on-channel-limit"});
  INFO((r.errors.empty() ? "" : r.errors.front()));
  CHECK(r.errors.empty());
  CHECK(o.mode == "http-connect");
  CHECK(o.port == 0);
  CHECK_FALSE(o.del);
  CHECK(o.keepalive == 30s);
  CHECK(o.strategies == std::vector<std::string>{"destHost", "default"});
}

TEST_CASE("a flag written --name= sets an empty value and leaves the next flag alone, as pflag",
          "[config]") {
  Opts o;
  auto r = run(o, {"--mode=", "--server-port=9000", "--proxy-strategies=", "--keepalive-time=2s"});
  CHECK(r.errors.empty());
  CHECK(o.mode.empty());
  CHECK(o.port == 9000);
  CHECK(o.strategies.empty());
  CHECK(o.keepalive == 2s);
  Opts b;
  b.del = false;
  auto r2 = run(b, {"--delete-existing-uds-file=", "--mode=x"});
  CHECK(r2.errors.empty());
  CHECK(b.del);  // an empty boolean is a bare one (pflag would refuse it)
  CHECK(b.mode == "x");
}

TEST_CASE("a bare boolean flag means true, a short alias works", "[config]") {
  Opts o;
  o.del = false;
  auto r = run(o, {"--delete-existing-uds-file", "-p", "9000"});
  CHECK(r.errors.empty());
  CHECK(o.del);
  CHECK(o.port == 9000);
}

TEST_CASE("every bad value is reported at once, naming its flag", "[config]") {
  Opts o;
  auto r = run(o, {"--server-port=eighty", "--keepalive-time=5", "--delete-existing-uds-file=maybe",
                   "--no-such-flag=1"});
  REQUIRE(r.errors.size() == 4);
  CHECK(r.errors.front().find("no-such-flag") != std::string::npos);  // unknown names first
  auto reported = [&](const std::string& flag) {
    for (const auto& e : r.errors) {
      if (e.find(flag) != std::string::npos) return true;
    }
    return false;
  };
  CHECK(reported("--server-port: invalid integer"));
  CHECK(reported("--keepalive-time: invalid duration"));
  CHECK(reported("--delete-existing-uds-file: invalid boolean"));
  CHECK(reported("no-such-flag"));
}

TEST_CASE("a YAML file supplies values, the command line wins", "[config]") {
  std::string path = "flag_parser_test_" + std::to_string(::getpid()) + ".yaml";
  {
    std::ofstream f(path);
    f << "mode: http-connect\nserver-port: 9999\nkeepalive-time: 2m\n"
         "proxy-strategies: [destHost, defaultRoute]\n";
  }
  Opts o;
  auto r = run(o, {"--config=" + path, "--server-port=7000"});
  std::remove(path.c_str());
  INFO((r.errors.empty() ? "" : r.errors.front()));
  CHECK(r.errors.empty());
  CHECK(o.mode == "http-connect");
  CHECK(o.port == 7000);
  CHECK(o.keepalive == 2min);
  CHECK(o.strategies == std::vector<std::string>{"destHost", "defaultRoute"});
}

TEST_CASE("the help flag asks to print usage and exit", "[config]") {
  Opts o;
  auto r = run(o, {"--help"});
  CHECK(r.exit_now);
  CHECK(r.output.find("--uds-name") == std::string::npos);
  CHECK(r.output.find("--keepalive-time") != std::string::npos);
}

namespace {

FlagParser::Result run_checked(std::vector<std::string> args) {
  std::string mode = "grpc";
  FlagParser p("prog", "test");
  p.add("mode", &mode, "mode");
  p.add_check_config();
  std::vector<const char*> argv{"prog"};
  for (auto& a : args) argv.push_back(a.c_str());
  return p.parse(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST_CASE("check-config is off unless asked for, and only where a daemon offers it", "[config]") {
  CHECK_FALSE(run_checked({"--mode=x"}).check_config);
  CHECK(run_checked({"--check-config", "--mode=x"}).check_config);
  CHECK(run_checked({"--mode=x", "--check-config=true"}).check_config);
  CHECK_FALSE(run_checked({"--check-config=false"}).check_config);
  Opts o;
  auto without = run(o, {"--check-config"});
  CHECK_FALSE(without.check_config);
  CHECK_FALSE(without.errors.empty());
}

TEST_CASE("check-config is still reported when the config file cannot be read", "[config]") {
  auto r = run_checked({"--check-config", "--config=/nonexistent/konn-check.yaml"});
  CHECK(r.check_config);
  CHECK_FALSE(r.errors.empty());
}

TEST_CASE("finish_check_config exits 0 when clean and 2 (the usage error status) with errors",
          "[config]") {
  CHECK(konn::core::config::kUsageErrorExit == 2);
  CHECK(konn::core::config::finish_check_config("prog", {}) == 0);
  CHECK(konn::core::config::finish_check_config("prog", {"--mode: bad"}) == 2);
  CHECK(konn::core::config::report_usage_errors("prog", {"--mode: bad"}) == 2);
}

namespace {

// A scratch YAML file, removed at the end of the test.
struct TempYaml {
  explicit TempYaml(const std::string& text)
      : path("flag_parser_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) +
             ".yaml") {
    std::ofstream(path) << text;
  }
  ~TempYaml() { std::remove(path.c_str()); }
  std::string path;
  static inline int counter = 0;
};

struct Socks5Like {
  std::string bind_address = "127.0.0.1";
  int port = 1080;
  std::string log_level = "info";
};

// A parser named like a konn daemon, so that other daemons' flags are recognised as theirs.
FlagParser::Result run_as(const std::string& program, std::vector<std::string> args) {
  Socks5Like o;
  FlagParser p(program, "test");
  p.add("bind-address", &o.bind_address, "address");
  p.add("port", &o.port, "port");
  p.add("log-level", &o.log_level, "level");
  p.add_check_config();
  std::vector<const char*> argv{program.c_str()};
  for (auto& a : args) argv.push_back(a.c_str());
  return p.parse(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST_CASE("an unknown --config key is an error naming the file, the line and the nearest key",
          "[config]") {
  TempYaml f("# socks5\nbind-adress: 0.0.0.0\n\nprot: 1081\nport: 1082\nzzzzzz: 1\n");
  auto r = run_as("socks5", {"--config=" + f.path});
  INFO(r.errors.size());
  REQUIRE(r.errors.size() == 3);
  CHECK(r.errors[0] == f.path + ":2: unknown key \"bind-adress\" (did you mean \"bind-address\"?)");
  CHECK(r.errors[1] == f.path + ":4: unknown key \"prot\" (did you mean \"port\"?)");
  CHECK(r.errors[2] == f.path + ":6: unknown key \"zzzzzz\"");  // nothing near: no guess
}

TEST_CASE("a mistyped key fails --check-config instead of being ignored", "[config]") {
  TempYaml f("bind-adress: 0.0.0.0\n");
  auto r = run_as("socks5", {"--check-config", "--config", f.path});
  CHECK(r.check_config);
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].find("bind-adress") != std::string::npos);
}

TEST_CASE("a key or flag of another konn daemon says whose it is", "[config]") {
  TempYaml f("port: 1080\nagent-port: 8091\nlease-namespace: kube-system\n");
  auto r = run_as("socks5", {"--config=" + f.path});
  REQUIRE(r.errors.size() == 2);
  CHECK(r.errors[0] == f.path + ":2: \"agent-port\" is a proxy-server flag, not a socks5 one");
  CHECK(r.errors[1] ==
        f.path +
            ":3: \"lease-namespace\" is a proxy-server and proxy-agent flag, not a socks5 one");

  auto cli = run_as("socks5", {"--agent-port=8091"});
  REQUIRE(cli.errors.size() == 1);
  CHECK(cli.errors[0] == "--agent-port is a proxy-server flag, not a socks5 one");

  auto several = run_as("socks5", {"--kubeconfig=/k"});
  REQUIRE(several.errors.size() == 1);
  CHECK(several.errors[0] ==
        "--kubeconfig is a proxy-server, proxy-agent and kubeproxy-http flag, not a socks5 one");
}

TEST_CASE("an unknown flag gets a did-you-mean and is reported once, value included", "[config]") {
  auto eq = run_as("socks5", {"--prot=8091"});
  REQUIRE(eq.errors.size() == 1);
  CHECK(eq.errors[0] == "unknown flag --prot (did you mean --port?)");

  auto spaced = run_as("socks5", {"--bind-adress", "0.0.0.0", "--port=1"});
  REQUIRE(spaced.errors.size() == 1);
  CHECK(spaced.errors[0] == "unknown flag --bind-adress (did you mean --bind-address?)");

  auto far = run_as("socks5", {"--frobnicate"});
  REQUIRE(far.errors.size() == 1);
  CHECK(far.errors[0] == "unknown flag --frobnicate");

  auto stray = run_as("socks5", {"stray"});
  REQUIRE(stray.errors.size() == 1);
  CHECK(stray.errors[0].find("unexpected argument \"stray\"") == 0);
  auto dashes = run_as("socks5", {"---", "--=x"});
  REQUIRE(dashes.errors.size() == 2);
  CHECK(dashes.errors[0].find("unexpected argument \"---\"") == 0);
  CHECK(dashes.errors[1].find("unexpected argument \"--=x\"") == 0);

  // The unknown flag comes before the errors of the flags that were understood.
  auto both = run_as("socks5", {"--port=eighty", "--agent-prot=8091"});
  REQUIRE(both.errors.size() == 2);
  CHECK(both.errors[0].find("unknown flag --agent-prot") == 0);
  CHECK(both.errors[1].find("--port: invalid integer") == 0);
}

TEST_CASE("nearest_name suggests only what is near enough to be a typo", "[config]") {
  using konn::core::config::nearest_name;
  std::vector<std::string> flags{"agent-port", "server-port", "port", "v", "proxy-strategies"};
  CHECK(nearest_name("agent-prot", flags) == "agent-port");
  CHECK(nearest_name("server-porrt", flags) == "server-port");
  CHECK(nearest_name("prot", flags) == "port");
  CHECK(nearest_name("proxy-stratgies", flags) == "proxy-strategies");
  CHECK(nearest_name("x", flags).empty());
  CHECK(nearest_name("health", flags).empty());
}

TEST_CASE("klog flags stay accepted in a config file where the daemon takes them", "[config]") {
  TempYaml f("v: 4\nlogtostderr: true\nlog-dir: /var/log\nalsologtostderr: false\n");
  std::string level = "info", file;
  FlagParser p("proxy-server", "test");
  konn::core::config::register_log_flags(p, &level, &file);
  std::string arg = "--config=" + f.path;
  std::vector<const char*> argv{"proxy-server", arg.c_str(), "--vmodule=x=2"};
  auto r = p.parse(static_cast<int>(argv.size()), argv.data());
  INFO((r.errors.empty() ? "" : r.errors.front()));
  CHECK(r.errors.empty());
  CHECK(level == "4");
}

TEST_CASE("a malformed config file names the file and the line", "[config]") {
  TempYaml f("port: 1080\nrule:\n  - {a: b}\n");
  auto r = run_as("socks5", {"--config=" + f.path});
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0] == f.path + ":3: key \"rule\" must hold scalars");
  TempYaml g("port: [1\n");
  auto bad = run_as("socks5", {"--config=" + g.path});
  REQUIRE(bad.errors.size() == 1);
  CHECK(bad.errors[0].find(g.path + ":") == 0);
  TempYaml h("config: other.yaml\n");
  auto nested = run_as("socks5", {"--config=" + h.path});
  REQUIRE(nested.errors.size() == 1);
  CHECK(nested.errors[0] == h.path + ":1: \"config\" is only a command-line flag");
}

TEST_CASE("help is wrapped at 100 columns and shows each default once", "[config]") {
  std::string id, name = "x", empty;
  int port = 8091, zero = 0;
  bool on = true, off = false;
  Duration d = std::chrono::seconds(30);
  std::vector<std::string> hosts{"a", "b"};
  FlagParser p("prog", "A description long enough to need wrapping, repeated: " +
                           std::string(150, 'w') + " end");
  p.add("server-id", &id, "Unique id");
  p.set_default_text("server-id", "$PROXY_SERVER_ID or a random UUID");
  p.add("name,n", &name, "A name");
  p.add("empty", &empty, "Nothing by default");
  p.add("agent-port", &port, "Port");
  p.add("zero", &zero, "Zero by default");
  p.add("on", &on, "On");
  p.add("off", &off, "Off");
  p.add("max-node-to-control-plane-connections", &d,
        "A long flag name and a long description: " + std::string(40, 'x') + " " +
            std::string(30, 'y') +
            " and many more words to wrap over several lines, again and "
            "again and again and again and again and again");
  p.add("proxy-server-host", &hosts, "Hosts");
  p.add_ignored("logtostderr", "klog flag");
  std::string help = p.help();
  std::istringstream lines(help);
  std::string line;
  while (std::getline(lines, line)) {
    INFO(line);
    CHECK(line.size() <= 100);
    CHECK(line.find("(default", line.find("(default") + 1) == std::string::npos);
  }
  CHECK(help.find("--server-id string") != std::string::npos);
  CHECK(help.find("(default $PROXY_SERVER_ID or a random UUID)") != std::string::npos);
  CHECK(help.find("(default \"\")") == std::string::npos);  // zero values show none, as pflag
  CHECK(help.find("(default 0)") == std::string::npos);
  CHECK(help.find("(default false)") == std::string::npos);
  CHECK(help.find("-n, --name string") != std::string::npos);
  CHECK(help.find("(default \"x\")") != std::string::npos);
  CHECK(help.find("(default 8091)") != std::string::npos);
  CHECK(help.find("(default true)") != std::string::npos);
  CHECK(help.find("(default 30s)") != std::string::npos);
  CHECK(help.find("--proxy-server-host strings") != std::string::npos);
  CHECK(help.find("(default \"a,b\")") != std::string::npos);
  CHECK(help.find("--config string") != std::string::npos);
  CHECK(help.find("-h, --help") != std::string::npos);
}

TEST_CASE("wrap_text breaks at spaces, indents, and cuts only words wider than a line",
          "[config]") {
  using konn::core::config::wrap_text;
  CHECK(wrap_text("aa bb cc", 0, 2, 5) == "aa bb\n  cc");
  CHECK(wrap_text("aa bb cc", 3, 3, 10) == "aa bb\n   cc");
  CHECK(wrap_text("abcdefghij", 0, 0, 4) == "abcd\nefgh\nij");
  CHECK(wrap_text("", 0, 0, 10).empty());
}

TEST_CASE("the daemon flag table knows each daemon once and finds other daemons' flags",
          "[config]") {
  using konn::core::config::daemon_flag_table;
  using konn::core::config::daemons_with_flag;
  REQUIRE(daemon_flag_table().size() == 4);
  CHECK(daemons_with_flag("socks5", "agent-port") == std::vector<std::string_view>{"proxy-server"});
  CHECK(daemons_with_flag("proxy-server", "agent-port").empty());
  CHECK(daemons_with_flag("socks5", "kubeconfig") ==
        std::vector<std::string_view>{"proxy-server", "proxy-agent", "kubeproxy-http"});
  CHECK(daemons_with_flag("socks5", "no-such").empty());
  CHECK(konn::core::config::daemon_list_text({"a", "b", "c"}) == "a a, b and c");
}
