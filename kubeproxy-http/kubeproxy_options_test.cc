#include "kubeproxy-http/kubeproxy_options.h"

#include <vector>

#include <catch2/catch.hpp>

using konn::kubeproxy::KubeproxyOptions;

namespace {
struct Parsed {
  KubeproxyOptions o;
  std::vector<std::string> errors;
};
Parsed parse(std::vector<const char*> args) {
  Parsed p;
  konn::core::config::FlagParser flags("kubeproxy-http", "test");
  p.o.register_flags(flags);
  args.insert(args.begin(), "kubeproxy-http");
  auto r = flags.parse(static_cast<int>(args.size()), args.data());
  p.errors = r.errors;
  for (auto& e : p.o.validate(flags.was_set("port"))) p.errors.push_back(e);
  return p;
}
}  // namespace

TEST_CASE("defaults are kubectl proxy's", "[options]") {
  auto p = parse({});
  CHECK(p.errors.empty());
  CHECK(p.o.port == 8001);
  CHECK(p.o.address == "127.0.0.1");
  CHECK(p.o.api_prefix == "/");
  CHECK(p.o.www_prefix == "/static/");
  CHECK(p.o.accept_paths == std::vector<std::string>{"^.*"});
  CHECK(p.o.reject_paths ==
        std::vector<std::string>{"^/api/.*/pods/.*/exec", "^/api/.*/pods/.*/attach"});
  CHECK(p.o.accept_hosts ==
        std::vector<std::string>{"^localhost$", "^127\\.0\\.0\\.1$", "^\\[::1\\]$"});
  CHECK(p.o.reject_methods == std::vector<std::string>{"^$"});
  CHECK_FALSE(p.o.disable_filter);
  CHECK(p.o.keepalive.count() == 0);
  CHECK(p.o.mode == "proxy");
}

TEST_CASE("short flags and kubeconfig flags", "[options]") {
  auto p =
      parse({"-p", "0", "-w", "/srv", "-P", "/s/", "--reject-methods=POST,PUT", "--context=c",
             "--as-group=a", "--as-group=b", "--insecure-skip-tls-verify", "-s", "https://x:6443"});
  CHECK(p.errors.empty());
  CHECK(p.o.port == 0);
  CHECK(p.o.www == "/srv");
  CHECK(p.o.www_prefix == "/s/");
  CHECK(p.o.reject_methods == std::vector<std::string>{"POST", "PUT"});
  CHECK(p.o.kube.context == "c");
  CHECK(p.o.kube.as_groups == std::vector<std::string>{"a", "b"});
  CHECK(p.o.kube.insecure_skip_tls_verify);
  CHECK(p.o.kube.server == "https://x:6443");
}

TEST_CASE("every error at once", "[options]") {
  auto p = parse({"-u", "/tmp/s.sock", "--port=9000", "--mode=socks", "--accept-paths=(",
                  "--proxy-user=nopass"});
  CHECK(p.errors.size() == 4);
}

TEST_CASE("exec plugin timeout: 30s by default, must be positive", "[options]") {
  CHECK(parse({}).o.exec_plugin_timeout == std::chrono::seconds(30));
  auto p = parse({"--exec-plugin-timeout=1500ms"});
  CHECK(p.errors.empty());
  CHECK(p.o.exec_plugin_timeout == std::chrono::milliseconds(1500));
  p = parse({"--exec-plugin-timeout=0"});
  REQUIRE(p.errors.size() == 1);
  CHECK(p.errors[0] == "--exec-plugin-timeout: must be positive");
}

TEST_CASE("health listener: off in proxy mode unless asked, on loopback when asked", "[options]") {
  KubeproxyOptions o;
  CHECK(o.effective_health_port() == -1);
  o.health_port_set = true;
  o.health_port = 0;
  CHECK(o.effective_health_port() == 0);
  CHECK(o.effective_health_bind_address() == "127.0.0.1");
  o.health_bind_address = "::1";
  CHECK(o.effective_health_bind_address() == "::1");

  KubeproxyOptions c;
  c.mode = "connect";
  CHECK(c.effective_health_port() == 8097);
  CHECK(c.effective_health_bind_address().empty());  // every interface: the kubelet probes it
  c.health_port_set = true;
  c.health_port = -1;
  CHECK(c.effective_health_port() == -1);
}
