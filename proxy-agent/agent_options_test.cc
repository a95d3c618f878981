#include "proxy-agent/agent_options.h"

#include <cstdlib>
#include <regex>

#include <catch2/catch.hpp>

using namespace konn::agent;
using konn::core::config::FlagParser;

namespace {

struct Parsed {
  AgentOptions options;
  std::vector<std::string> errors;  // parse errors, then validate() errors
};

Parsed parse(std::vector<const char*> args) {
  Parsed out;
  FlagParser parser("proxy-agent", "test");
  out.options.register_flags(parser);
  args.insert(args.begin(), "proxy-agent");
  auto r = parser.parse(static_cast<int>(args.size()), args.data());
  out.options.apply_environment();
  out.errors = r.errors;
  for (auto& e : out.options.validate()) out.errors.push_back(e);
  return out;
}

bool mentions(const std::vector<std::string>& errors, const std::string& text) {
  for (const auto& e : errors) {
    if (e.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("agent defaults match upstream", "[agent][options]") {
  auto p = parse({});
  CHECK(p.errors.empty());
  const auto& o = p.options;
  CHECK(o.proxy_server_hosts == std::vector<std::string>{"127.0.0.1"});
  CHECK(o.proxy_server_port == 8091);
  CHECK(o.sync_interval == std::chrono::seconds(1));
  CHECK(o.sync_interval_cap == std::chrono::seconds(10));
  CHECK(o.probe_interval == std::chrono::seconds(1));
  CHECK(o.keepalive_time == std::chrono::hours(1));
  CHECK(o.xfr_channel_size == 150);
  CHECK(o.dial_timeout == std::chrono::seconds(5));
  CHECK_FALSE(o.sync_forever);
  CHECK(o.log_level == "info");
}

TEST_CASE("agent flags parse with pflag syntax", "[agent][options]") {
  auto p = parse({"--proxy-server-host=a.example,b.example", "--proxy-server-port", "9000",
                  "--agent-id=node-7",
                  "--agent-identifiers=host=node1&ipv4=10.0.0.5&ipv6=fd00::1"
                  "&cidr=10.0.0.0/8&default-route=true",
                  "--sync-interval=250ms", "--sync-interval-cap=3s", "--sync-forever",
                  "--keepalive-time=45s", "--dial-timeout=2s", "--xfr-channel-size=10",
                  "--alpn-proto=konnectivity,other", "--ca-cert=/ca.pem", "--agent-cert=/c.pem",
                  "--agent-key=/k.pem", "--service-account-token-path=/token"});
  REQUIRE(p.errors.empty());
  const auto& o = p.options;
  CHECK(o.proxy_server_hosts == std::vector<std::string>{"a.example", "b.example"});
  CHECK(o.proxy_server_port == 9000);
  CHECK(o.agent_id == "node-7");
  CHECK(o.sync_interval == std::chrono::milliseconds(250));
  CHECK(o.sync_interval_cap == std::chrono::seconds(3));
  CHECK(o.sync_forever);
  CHECK(o.keepalive_time == std::chrono::seconds(45));
  CHECK(o.dial_timeout == std::chrono::seconds(2));
  CHECK(o.alpn_protos == std::vector<std::string>{"konnectivity", "other"});
  CHECK(o.service_account_token_path == "/token");
}

TEST_CASE("compatibility and klog flags are accepted", "[agent][options]") {
  auto p = parse({"--v=4",
                  "--logtostderr=true",
                  "--alsologtostderr",
                  "--log-dir=/tmp",
                  "--log-file-max-size=100",
                  "--skip-headers",
                  "--one-output=true",
                  "--stderrthreshold=2",
                  "--vmodule=x=1",
                  "--warn-on-channel-limit",
                  "--count-server-leases",
                  "--lease-namespace=ns",
                  "--lease-label-selector=a=b",
                  "--lease-label=a=b",
                  "--server-count-source=max",
                  "--kubeconfig=/kc",
                  "--kube-api-content-type=application/json",
                  "--health-server-host=0.0.0.0",
                  "--health-server-port=8093",
                  "--admin-bind-address=127.0.0.1",
                  "--admin-server-port=8094",
                  "--enable-profiling",
                  "--enable-contention-profiling",
                  "--add-dir-header",
                  "--skip-log-headers",
                  "--log-backtrace-at=:0"});
  CHECK(p.errors.empty());
  CHECK(p.options.log_level == "4");
}

TEST_CASE("every agent option error is reported at once", "[agent][options]") {
  auto p = parse({"--sync-interval=5s", "--sync-interval-cap=1s", "--xfr-channel-size=0",
                  "--agent-cert=/c.pem", "--proxy-server-port=70000",
                  "--agent-identifiers=uid=1&ipv4=999.1.1.1&cidr=10.0.0.0/40&default-route=maybe",
                  "--v=loud"});
  CHECK(mentions(p.errors, "--sync-interval-cap"));
  CHECK(mentions(p.errors, "--xfr-channel-size"));
  CHECK(mentions(p.errors, "--agent-cert and --agent-key"));
  CHECK(mentions(p.errors, "--proxy-server-port"));
  CHECK(mentions(p.errors, "unknown address type: uid"));
  CHECK(mentions(p.errors, "--v"));
  CHECK(p.errors.size() == 6);
  // Values upstream accepts though they do not parse: warnings, not errors.
  auto w = p.options.warnings();
  CHECK(mentions(w, "ipv4 \"999.1.1.1\" is not an IPv4 address: sent as is"));
  CHECK(mentions(w, "cidr \"10.0.0.0/40\" is not a CIDR block: it matches no dial"));
  CHECK(mentions(w, "default-route \"maybe\" is not a boolean: the agent is not a default route"));
}

TEST_CASE("bad values and unknown flags name the flag", "[agent][options]") {
  auto p = parse({"--sync-interval=soon", "--proxy-server-port=abc"});
  CHECK(mentions(p.errors, "--sync-interval"));
  CHECK(mentions(p.errors, "--proxy-server-port"));
  auto u = parse({"--no-such-flag=1"});
  CHECK(mentions(u.errors, "no-such-flag"));
}

TEST_CASE("agent identifiers decode URL escapes", "[agent][options]") {
  CHECK(validate_agent_identifiers("").empty());
  CHECK(validate_agent_identifiers("host=node%2D1&ipv6=%3A%3A1").empty());
  CHECK(validate_agent_identifiers("host=a&host=b").empty());
  CHECK(validate_agent_identifiers("host=%zz").size() == 1);
  std::vector<std::string> warnings;
  CHECK(validate_agent_identifiers("host=", &warnings).empty());
  CHECK(mentions(warnings, "an empty host matches no dial"));
}

TEST_CASE("agent id comes from the flag, else PROXY_AGENT_ID, else a UUID", "[agent][options]") {
  ::setenv("PROXY_AGENT_ID", "from-env", 1);
  CHECK(parse({}).options.agent_id == "from-env");
  CHECK(parse({"--agent-id=from-flag"}).options.agent_id == "from-flag");
  ::unsetenv("PROXY_AGENT_ID");
  std::regex uuid("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
  auto a = parse({}).options.agent_id;
  CHECK(std::regex_match(a, uuid));
  CHECK(parse({}).options.agent_id != a);
}

TEST_CASE("lease counting needs a selector and a sane poll interval", "[agent][options]") {
  auto p = parse({"--count-server-leases", "--lease-poll-interval=10ms"});
  CHECK(mentions(p.errors, "--lease-poll-interval"));
  auto ok = parse({"--count-server-leases", "--lease-poll-interval=2s"});
  CHECK(ok.errors.empty());
  CHECK(ok.options.lease_label_selector == "k8s-app=konnectivity-server");
  CHECK(ok.options.server_count_source == "default");
}

TEST_CASE("allowed destinations: metadata denied by default, rules checked at startup",
          "[agent][options]") {
  auto d = parse({});
  CHECK(d.options.allowed_destinations ==
        std::vector<std::string>{"*", "!169.254.0.0/16", "!fe80::/10", "!fd00:ec2::254"});
  CHECK(d.options.max_endpoint_connections == 20000);
  auto all = parse({"--allowed-destinations=*"});
  CHECK(all.errors.empty());
  CHECK(all.options.allowed_destinations == std::vector<std::string>{"*"});
  auto list = parse({"--allowed-destinations=10.0.0.0/8:10250,[fd00::/8]:443,!10.0.0.1"});
  CHECK(list.errors.empty());
  CHECK(list.options.allowed_destinations.size() == 3);
  CHECK(
      mentions(parse({"--allowed-destinations="}).errors, "--allowed-destinations: no allow rule"));
  CHECK(mentions(parse({"--allowed-destinations=metadata.google.internal"}).errors,
                 "not an IP address"));
  CHECK(mentions(parse({"--max-endpoint-connections=-1"}).errors, "--max-endpoint-connections"));
  CHECK(parse({"--max-endpoint-connections=0"}).errors.empty());  // no limit
}

TEST_CASE("the agent's half-close timeout defaults to 30s and must be positive",
          "[agent][options]") {
  auto d = parse({});
  CHECK(d.options.half_close_timeout == std::chrono::seconds(30));
  auto s = parse({"--half-close-timeout=2s"});
  CHECK(s.errors.empty());
  CHECK(s.options.half_close_timeout == std::chrono::seconds(2));
  CHECK(mentions(parse({"--half-close-timeout=0s"}).errors, "--half-close-timeout"));
}

TEST_CASE("the agent's drain timeout defaults to 0 (a second signal ends the drain)",
          "[agent][options]") {
  CHECK(parse({}).options.drain_timeout.count() == 0);
  auto s = parse({"--drain-timeout=90s"});
  CHECK(s.errors.empty());
  CHECK(s.options.drain_timeout == std::chrono::seconds(90));
  CHECK(mentions(parse({"--drain-timeout=-1s"}).errors, "--drain-timeout"));
}

TEST_CASE("agent --proxy-url and --server-connect-timeout", "[agent][options][egress-proxy]") {
  auto p = parse({"--proxy-url=http://u:p%40ss@proxy.corp:3128", "--server-connect-timeout=2s"});
  CHECK(p.errors.empty());
  CHECK(p.options.server_connect_timeout == std::chrono::seconds(2));
  auto proxy = p.options.egress_proxy().proxy_for("konn.example", 8091);
  REQUIRE(proxy);
  CHECK(proxy->address() == "proxy.corp:3128");
  CHECK(proxy->password == "p@ss");

  CHECK(parse({}).options.server_connect_timeout == std::chrono::seconds(20));
  auto bad = parse({"--proxy-url=socks5://proxy:1080", "--server-connect-timeout=10ms"});
  CHECK(mentions(bad.errors, "--proxy-url: scheme \"socks5\" is not supported"));
  CHECK(mentions(bad.errors, "--server-connect-timeout: must be at least 100ms"));
}

TEST_CASE("node-to-control-plane listeners parse as ADDR:PORT[=HOST:PORT]", "[agent][options]") {
  auto p = parse({"--node-to-control-plane-listen=127.0.0.1:6443",
                  "--node-to-control-plane-listen=[::1]:6443=kube-apiserver.example:443",
                  "--max-node-to-control-plane-connections=5"});
  CHECK(p.errors.empty());
  REQUIRE(p.options.node_to_control_plane_listen.size() == 2);
  CHECK(p.options.max_node_to_control_plane_connections == 5);
  std::string error;
  auto a = parse_node_listen(p.options.node_to_control_plane_listen[0], &error);
  REQUIRE(a);
  CHECK(a->listen.host == "127.0.0.1");
  CHECK(a->listen.port == 6443);
  CHECK(a->destination.empty());
  auto b = parse_node_listen(p.options.node_to_control_plane_listen[1], &error);
  REQUIRE(b);
  CHECK(b->listen.host == "::1");
  CHECK(b->destination == "kube-apiserver.example:443");
  CHECK(parse({}).options.node_to_control_plane_listen.empty());
  CHECK(parse({}).options.max_node_to_control_plane_connections == 10000);

  auto bad = parse({"--node-to-control-plane-listen=6443",
                    "--node-to-control-plane-listen=127.0.0.1:6443=apiserver",
                    "--max-node-to-control-plane-connections=-1"});
  CHECK(mentions(bad.errors, "--node-to-control-plane-listen: \"6443\" is not ADDR:PORT"));
  CHECK(mentions(bad.errors,
                 "--node-to-control-plane-listen: destination \"apiserver\" is not HOST:PORT"));
  CHECK(mentions(bad.errors, "--max-node-to-control-plane-connections"));
  CHECK(bad.errors.size() == 3);
}

TEST_CASE("contention profiling needs --enable-profiling too, as upstream",
          "[agent][options]") {
  CHECK(mentions(parse({"--enable-contention-profiling"}).errors,
                 "--enable-contention-profiling: needs --enable-profiling"));
  auto both = parse({"--enable-profiling", "--enable-contention-profiling"});
  CHECK(both.errors.empty());
  CHECK(both.options.enable_profiling);
}

TEST_CASE("agent --alpn-proto: the list offered, h2 added unless given", "[agent][options]") {
  CHECK(parse({}).options.alpn_offered().empty());
  auto two = parse({"--alpn-proto=konnectivity,x-test"});
  CHECK(two.errors.empty());
  CHECK(two.options.alpn_offered() == std::vector<std::string>{"konnectivity", "x-test", "h2"});
  auto with_h2 = parse({"--alpn-proto=h2,konnectivity"});
  CHECK(with_h2.options.alpn_offered() == std::vector<std::string>{"h2", "konnectivity"});
  // An id OpenSSL cannot send (Go's client refuses it at every handshake). (Empty list items
  // are dropped by the flag parser, as for every list flag.)
  CHECK(mentions(parse({("--alpn-proto=" + std::string(256, 'x')).c_str()}).errors,
                 "is not an ALPN id (1 to 255 bytes)"));
}

TEST_CASE(
    "agent --kube-api-content-type: a warning when protobuf is asked for and leases are "
    "listed",
    "[agent][options]") {
  // Upstream's default is protobuf; konn lists Leases in JSON, and says so.
  auto leases = parse({"--count-server-leases"});
  REQUIRE(leases.errors.empty());
  CHECK(mentions(leases.options.warnings(),
                 "--kube-api-content-type=application/vnd.kubernetes.protobuf is not used: "
                 "konn's apiserver calls (TokenReview, Lease) always use application/json"));
  CHECK(parse({"--count-server-leases", "--kube-api-content-type=application/json"})
            .options.warnings()
            .empty());
  // No apiserver call, nothing to say.
  CHECK(parse({}).options.warnings().empty());
}

TEST_CASE("agent values upstream accepts: accepted with its meaning and a warning",
          "[agent][options]") {
  // --server-count-source="": upstream's default.
  auto empty_source = parse({"--server-count-source="});
  CHECK(empty_source.errors.empty());
  CHECK(mentions(parse({"--server-count-source=min"}).errors, "--server-count-source"));
  // --keepalive-time 0 or less: gRPC-Go raises it to its floor; konn to its own, 30s.
  for (const char* v : {"--keepalive-time=0s", "--keepalive-time=-5s"}) {
    INFO(v);
    auto p = parse({v});
    CHECK(p.errors.empty());
    CHECK(mentions(p.options.warnings(), "pings every 30s, konn's floor"));
  }
  // --lease-namespace="": the leases of every namespace, as upstream's client-go lists them.
  auto all = parse(
      {"--count-server-leases", "--lease-namespace=", "--kube-api-content-type=application/json"});
  CHECK(all.errors.empty());
  REQUIRE(all.options.warnings().size() == 1);
  CHECK(mentions(all.options.warnings(), "the Leases of every namespace are counted"));
  // What would spin or never connect stays refused.
  CHECK(mentions(parse({"--sync-interval=0s"}).errors, "--sync-interval: must be positive"));
  CHECK(mentions(parse({"--probe-interval=0s"}).errors, "--probe-interval: must be positive"));
  CHECK(parse({}).options.warnings().empty());
}
