// Runs the built proxy-agent binary: flag errors and --help, as an operator sees them.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

namespace {

struct Run {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// `env`: NAME=value assignments put before the command.
Run run_agent(const std::string& args, const std::string& env = "") {
  const char* dir = std::getenv("KONN_BIN_DIR");
  std::string bin = std::string(dir != nullptr ? dir : KONN_AGENT_TEST_BIN_DIR) + "/proxy-agent";
  std::string cmd = env + " timeout 20 '" + bin + "' " + args + " 2>&1";
  Run r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace

TEST_CASE("proxy-agent --help lists the upstream flags and exits 0", "[agent][binary]") {
  auto r = run_agent("--help");
  CHECK(r.exit_code == 0);
  for (const char* flag : {"--proxy-server-host", "--proxy-server-port", "--ca-cert", "--agent-cert",
                           "--agent-key", "--agent-id", "--agent-identifiers", "--sync-interval",
                           "--sync-interval-cap", "--probe-interval", "--sync-forever",
                           "--keepalive-time", "--service-account-token-path",
                           "--xfr-channel-size", "--dial-timeout", "--alpn-proto"}) {
    CHECK(r.output.find(flag) != std::string::npos);
  }
}

TEST_CASE("proxy-agent names every bad flag and exits 2 (a usage error)", "[agent][binary]") {
  auto unknown = run_agent("--no-such-flag=1");
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.output.find("no-such-flag") != std::string::npos);

  auto bad = run_agent("--sync-interval=5s --sync-interval-cap=1s --agent-identifiers=uid=1");
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("--sync-interval-cap") != std::string::npos);
  CHECK(bad.output.find("--agent-identifiers") != std::string::npos);

  auto value = run_agent("--keepalive-time=often");
  CHECK(value.exit_code == 2);
  CHECK(value.output.find("--keepalive-time") != std::string::npos);
}

TEST_CASE("proxy-agent refuses a bad --proxy-url or HTTPS_PROXY at start-up", "[agent][binary]") {
  auto scheme = run_agent("--proxy-url=https://proxy:3128");
  CHECK(scheme.exit_code == 2);
  CHECK(scheme.output.find("--proxy-url: scheme \"https\" is not supported") != std::string::npos);

  auto port = run_agent("--proxy-url=http://u:secret@proxy:99999");
  CHECK(port.exit_code == 2);
  CHECK(port.output.find("--proxy-url: proxy port \"99999\" must be between 1 and 65535") !=
        std::string::npos);
  CHECK(port.output.find("secret") == std::string::npos);

  auto env = run_agent("", "HTTPS_PROXY=socks5://proxy:1080");
  CHECK(env.exit_code == 2);
  CHECK(env.output.find("$HTTPS_PROXY: scheme \"socks5\"") != std::string::npos);

  // The flag wins: a bad environment does not matter then.
  auto both = run_agent("--check-config --proxy-url=http://proxy:3128", "HTTPS_PROXY=socks5://x");
  CHECK(both.exit_code == 0);
}
