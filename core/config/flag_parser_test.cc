#include "core/config/flag_parser.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <catch2/catch.hpp>

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

TEST_CASE("a flag written --name= sets an empty value and leaves the next flag alone, as pflag", "[config]") {
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

TEST_CASE("finish_check_config exits 0 when clean and 2 with errors", "[config]") {
  CHECK(konn::core::config::finish_check_config("prog", {}) == 0);
  CHECK(konn::core::config::finish_check_config("prog", {"--mode: bad"}) == 2);
}
