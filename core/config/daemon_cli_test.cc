// Runs the four built daemons as an operator does: --help, a mistyped flag, a mistyped --config
// key, a value out of range. Checks what they print and the one usage exit status (2).
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <catch2/catch.hpp>

#include "core/config/daemon_flags.h"
#include "core/config/flag_parser.h"
#include "tests/support/process_runner.h"

using konn::testsupport::ProcessOptions;
using konn::testsupport::RunResult;

namespace {

const std::vector<std::string> kDaemons = {"proxy-server", "proxy-agent", "socks5",
                                           "kubeproxy-http"};

RunResult run(const std::string& daemon, std::vector<std::string> args) {
  ProcessOptions o;
  o.binary = daemon;
  o.args = std::move(args);
  return konn::testsupport::run_process(std::move(o), std::chrono::seconds(20));
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// --help split into flag entries: long name -> its text (wrapped lines joined by one space).
std::vector<std::pair<std::string, std::string>> help_entries(const std::string& help) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& line : lines_of(help)) {
    // An entry starts with its names ("  -p, --port int", "      --mode string"); the
    // description, and its wrapped lines, start at column 36.
    auto first = line.find_first_not_of(' ');
    auto dashes = line.find("--");
    bool starts_entry = first != std::string::npos && first <= 6 && line[first] == '-' &&
                        dashes != std::string::npos;
    if (starts_entry) {
      auto end = line.find_first_of(" =", dashes);
      out.emplace_back(line.substr(dashes + 2, end - dashes - 2), "");
    }
    if (out.empty()) continue;
    std::istringstream words(line);
    std::string word;
    while (words >> word) out.back().second += (out.back().second.empty() ? "" : " ") + word;
  }
  return out;
}

std::string entry(const std::string& help, const std::string& name) {
  for (auto& [n, text] : help_entries(help)) {
    if (n == name) return text;
  }
  return {};
}

struct TempFile {
  explicit TempFile(const std::string& text)
      : path("/tmp/konn-daemon-cli-" + std::to_string(::getpid()) + "-" +
             std::to_string(counter++) + ".yaml") {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
  std::string path;
  static inline int counter = 0;
};

}  // namespace

TEST_CASE("every daemon's --help fits in 100 columns and shows each default once",
          "[config][binary]") {
  for (const auto& daemon : kDaemons) {
    auto r = run(daemon, {"--help"});
    INFO(daemon << ": " << r.output);
    CHECK(r.exit_code == 0);
    for (const auto& line : lines_of(r.output)) {
      INFO(line);
      CHECK(line.size() <= 100);
    }
    auto entries = help_entries(r.output);
    CHECK(entries.size() > 10);
    for (const auto& [name, text] : entries) {
      INFO(name << ": " << text);
      auto first = text.find("(default");
      CHECK((first == std::string::npos || text.find("(default", first + 1) == std::string::npos));
      CHECK(text.find("(default \"\")") == std::string::npos);
    }
  }
}

TEST_CASE("each daemon's --help lists exactly its flags of the shared daemon table",
          "[config][binary]") {
  for (const auto& d : konn::core::config::daemon_flag_table()) {
    std::string daemon(d.daemon);
    auto r = run(daemon, {"--help"});
    std::set<std::string> listed;
    for (const auto& [name, text] : help_entries(r.output)) listed.insert(name);
    std::set<std::string> table{"config", "help", "check-config"};
    for (auto f : d.flags) table.insert(std::string(f));
    INFO(daemon);
    CHECK(listed == table);
  }
}

TEST_CASE("help shows the defaults that were doubled, contradictory or missing",
          "[config][binary]") {
  auto server = run("proxy-server", {"--help"}).output;
  CHECK(entry(server, "server-id") ==
        "--server-id string Unique id of this server (default $PROXY_SERVER_ID or a random UUID)");
  CHECK(entry(server, "proxy-strategies").find("(default \"default\")") != std::string::npos);
  CHECK(entry(server, "cipher-suites").find("(default the TLS library's secure suites)") !=
        std::string::npos);
  auto agent = run("proxy-agent", {"--help"}).output;
  CHECK(entry(agent, "proxy-server-host").find("(default \"127.0.0.1\")") != std::string::npos);
  CHECK(entry(agent, "agent-id").find("(default $PROXY_AGENT_ID or a random UUID)") !=
        std::string::npos);
  auto kubeproxy = run("kubeproxy-http", {"--help"}).output;
  auto health = entry(kubeproxy, "health-port");
  CHECK(health.find("(default 8097 in connect mode, none in proxy mode)") != std::string::npos);
  CHECK(health.find("(default 8097)") == std::string::npos);
  CHECK(entry(kubeproxy, "accept-paths").find("(default \"^.*\")") != std::string::npos);
  CHECK(entry(kubeproxy, "port").rfind("-p, --port int", 0) == 0);
}

// reliability: proxy-server | an unknown flag (--agent-prot=8091) | exit 2, that one line: "unknown
// reliability+: flag --agent-prot (did you mean --agent-port?)" | on stderr | nothing: it does not
// reliability+: start
// reliability: proxy-agent | an unknown flag (--proxy-server-hots=a) | exit 2, that one line with
// reliability+: "did you mean --proxy-server-host?" | on stderr | nothing: it does not start
// reliability: socks5 | an unknown flag (--prot), or another daemon's (--agent-port) | exit 2,
// reliability+: "did you mean --port?" or "--agent-port is a proxy-server flag, not a socks5 one" |
// reliability+: on stderr | nothing: it does not start
// reliability: kubeproxy-http | an unknown flag (--accept-path=x) | exit 2, that one line with "did
// reliability+: you mean --accept-paths?" | on stderr | nothing: it does not start
TEST_CASE("an unknown flag exits 2 with a did-you-mean and nothing else", "[config][binary]") {
  struct Case {
    std::string daemon, arg, expected;
  };
  std::vector<Case> cases = {
      {"proxy-server", "--agent-prot=8091",
       "proxy-server: unknown flag --agent-prot (did you mean --agent-port?)\n"},
      {"proxy-agent", "--proxy-server-hots=a",
       "proxy-agent: unknown flag --proxy-server-hots (did you mean --proxy-server-host?)\n"},
      {"socks5", "--prot=1080", "socks5: unknown flag --prot (did you mean --port?)\n"},
      {"kubeproxy-http", "--accept-path=x",
       "kubeproxy-http: unknown flag --accept-path (did you mean --accept-paths?)\n"},
      {"socks5", "--agent-port=8091",
       "socks5: --agent-port is a proxy-server flag, not a socks5 one\n"},
  };
  for (const auto& c : cases) {
    for (bool check : {false, true}) {
      std::vector<std::string> args{c.arg};
      if (check) args.push_back("--check-config");
      auto r = run(c.daemon, args);
      INFO(c.daemon << " " << c.arg << (check ? " --check-config" : ""));
      CHECK(r.exit_code == konn::core::config::kUsageErrorExit);
      CHECK(r.output == c.expected);  // no "required" complaint about other flags
    }
  }
}

// reliability: socks5 | --config file with bind-adress: and prot: (typos), or agent-port: (a
// reliability+: proxy-server key), with --check-config | exit 2: "f.yaml:1: unknown key
// reliability+: "bind-adress" (did you mean "bind-address"?)", "f.yaml:2: "agent-port" is a
// reliability+: proxy-server flag, not a socks5 one" | on stderr | nothing: it does not start
// reliability: proxy-server | --config file with agent-prot: | exit 2: "f.yaml:2: unknown key
// reliability+: "agent-prot" (did you mean "agent-port"?)" | on stderr | nothing: it does not start
TEST_CASE("a config file with a mistyped or foreign key fails --check-config (exit 2), naming it",
          "[config][binary]") {
  TempFile socks5("bind-adress: 0.0.0.0\nprot: 1080\n");
  auto r = run("socks5", {"--check-config", "--config=" + socks5.path});
  CHECK(r.exit_code == 2);
  CHECK(r.output == "socks5: " + socks5.path +
                        ":1: unknown key \"bind-adress\" (did you mean \"bind-address\"?)\n"
                        "socks5: " +
                        socks5.path + ":2: unknown key \"prot\" (did you mean \"port\"?)\n");

  TempFile server("uds-name: /tmp/s.sock\nagent-prot: 8091\n");
  r = run("proxy-server", {"--check-config", "--config=" + server.path});
  CHECK(r.exit_code == 2);
  CHECK(r.output == "proxy-server: " + server.path +
                        ":2: unknown key \"agent-prot\" (did you mean \"agent-port\"?)\n");

  TempFile foreign("port: 1080\nagent-port: 8091\n");
  r = run("socks5", {"--check-config", "--config=" + foreign.path});
  CHECK(r.exit_code == 2);
  CHECK(r.output == "socks5: " + foreign.path +
                        ":2: \"agent-port\" is a proxy-server flag, not a socks5 one\n");

  TempFile kube("mode: connect\nhealth-prot: 1\n");
  r = run("kubeproxy-http", {"--check-config", "--config=" + kube.path});
  CHECK(r.exit_code == 2);
  CHECK(r.output.find(":2: unknown key \"health-prot\" (did you mean \"health-port\"?)") !=
        std::string::npos);

  TempFile agent("proxy-server-host: a\nlogtostderr: true\nv: 2\nsync-intervall: 1s\n");
  r = run("proxy-agent", {"--check-config", "--config=" + agent.path});
  CHECK(r.exit_code == 2);
  CHECK(r.output == "proxy-agent: " + agent.path +
                        ":4: unknown key \"sync-intervall\" (did you mean \"sync-interval\"?)\n");
}

TEST_CASE("a value out of range is worded the same in every daemon and exits 2",
          "[config][binary]") {
  struct Case {
    std::string daemon, arg, expected;
  };
  std::vector<Case> cases = {
      {"proxy-server", "--agent-port=70000",
       "--agent-port: must be between 0 and 65535, got 70000"},
      {"proxy-agent", "--proxy-server-port=0",
       "--proxy-server-port: must be between 1 and 65535, got 0"},
      {"socks5", "--port=70000", "--port: must be between 0 and 65535, got 70000"},
      {"kubeproxy-http", "--health-port=-2", "--health-port: must be between -1 and 65535, got -2"},
  };
  for (const auto& c : cases) {
    for (bool check : {false, true}) {
      std::vector<std::string> args{c.arg};
      if (check) args.push_back("--check-config");
      auto r = run(c.daemon, args);
      INFO(c.daemon << " " << c.arg << (check ? " --check-config" : "") << ": " << r.output);
      CHECK(r.exit_code == 2);
      CHECK(r.output.find(c.daemon + ": " + c.expected + "\n") != std::string::npos);
    }
  }
}
