#include "proxy-server/server_options.h"

#include <cstdlib>

#include <catch2/catch.hpp>
#include <openssl/ssl.h>

using konn::server::ServerOptions;

namespace {

std::vector<std::string> parse(ServerOptions& o, std::vector<std::string> args) {
  konn::core::config::FlagParser p("proxy-server", "test");
  o.register_flags(p);
  std::vector<const char*> argv{"proxy-server"};
  for (auto& a : args) argv.push_back(a.c_str());
  auto r = p.parse(static_cast<int>(argv.size()), argv.data());
  o.apply_environment();
  auto errors = r.errors;
  for (auto& e : o.validate()) errors.push_back(e);
  return errors;
}

bool mentions(const std::vector<std::string>& errors, const std::string& what) {
  for (const auto& e : errors) {
    if (e.find(what) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("the upstream grpc-mode manifest command line is accepted unchanged", "[server]") {
  // The konnectivity-server static pod of the Kubernetes documentation.
  ServerOptions o;
  auto errors =
      parse(o, {"--logtostderr=true",
                "--uds-name=/etc/kubernetes/konnectivity-server/konnectivity-server.socket",
                "--delete-existing-uds-file", "--cluster-cert=/etc/kubernetes/pki/apiserver.crt",
                "--cluster-key=/etc/kubernetes/pki/apiserver.key", "--mode=grpc", "--server-port=0",
                "--agent-port=8132", "--admin-port=8133", "--health-port=8134",
                "--agent-namespace=kube-system", "--agent-service-account=konnectivity-agent",
                "--kubeconfig=/etc/kubernetes/konnectivity-server.conf",
                "--authentication-audience=system:konnectivity-server"});
  INFO((errors.empty() ? "" : errors.front()));
  CHECK(errors.empty());
  CHECK(o.agent_port == 8132);
  CHECK(o.server_port == 0);
  CHECK(o.delete_existing_uds_file);
}

TEST_CASE("server id defaults to PROXY_SERVER_ID, else a UUID", "[server]") {
  ::setenv("PROXY_SERVER_ID", "server-a", 1);
  ServerOptions a;
  parse(a, {"--uds-name=/tmp/x.sock", "--server-port=0", "--cluster-cert=c", "--cluster-key=k"});
  CHECK(a.server_id == "server-a");
  ::unsetenv("PROXY_SERVER_ID");
  ServerOptions b;
  parse(b, {"--uds-name=/tmp/x.sock", "--server-port=0", "--cluster-cert=c", "--cluster-key=k"});
  CHECK(b.server_id.size() == 36);
  ServerOptions c;
  parse(c, {"--server-id=explicit", "--uds-name=/tmp/x.sock", "--server-port=0", "--cluster-cert=c",
            "--cluster-key=k"});
  CHECK(c.server_id == "explicit");
}

TEST_CASE("every invalid server option is reported, naming the flag", "[server]") {
  ServerOptions o;
  auto errors = parse(o, {"--mode=udp", "--uds-name=/tmp/s.sock", "--server-port=8090",
                          "--agent-namespace=kube-system", "--xfr-channel-size=0",
                          "--proxy-strategies=default,nearest", "--keepalive-time=forever"});
  CHECK(mentions(errors, "--mode"));
  CHECK(mentions(errors, "--server-port: must be 0"));
  CHECK(mentions(errors, "--cluster-cert"));
  CHECK(mentions(errors, "set all three"));
  CHECK(mentions(errors, "--xfr-channel-size"));
  CHECK(mentions(errors, "nearest"));
  CHECK(mentions(errors, "--keepalive-time: invalid duration"));
}

TEST_CASE("TLS suites and versions are checked like upstream, and never weakened", "[server]") {
  ServerOptions o;
  auto errors =
      parse(o, {"--uds-name=/tmp/s.sock", "--server-port=0", "--cluster-cert=c", "--cluster-key=k",
                "--cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_RC4_128_SHA",
                "--tls-min-version=VersionTLS9"});
  CHECK(mentions(errors, "TLS_RSA_WITH_RC4_128_SHA is insecure"));
  CHECK(mentions(errors, "unknown version \"VersionTLS9\""));
  ServerOptions ok;
  auto fine = parse(ok, {"--uds-name=/tmp/s.sock", "--server-port=0", "--cluster-cert=c",
                         "--cluster-key=k", "--cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                         "--tls-min-version=VersionTLS12"});
  CHECK(fine.empty());
  CHECK(ok.openssl_ciphers() == "ECDHE-RSA-AES128-GCM-SHA256");
  CHECK(ok.openssl_min_version() == TLS1_2_VERSION);
  CHECK(ok.warnings().empty());
  ServerOptions v13;
  CHECK(parse(v13, {"--uds-name=/tmp/s.sock", "--server-port=0", "--cluster-cert=c",
                    "--cluster-key=k", "--tls-min-version=VersionTLS13"})
            .empty());
  CHECK(v13.openssl_min_version() == TLS1_3_VERSION);
  CHECK(v13.warnings().empty());
  // Upstream accepts 1.0 and 1.1 with a warning; konn too, and TLS 1.2 stays the floor.
  for (const char* v : {"VersionTLS10", "VersionTLS11"}) {
    INFO(v);
    ServerOptions old;
    CHECK(parse(old, {"--uds-name=/tmp/s.sock", "--server-port=0", "--cluster-cert=c",
                      "--cluster-key=k", std::string("--tls-min-version=") + v})
              .empty());
    CHECK(old.openssl_min_version() == TLS1_2_VERSION);
    CHECK(mentions(old.warnings(),
                   std::string("--tls-min-version=") + v + " is below TLS 1.2 and insecure"));
  }
}

TEST_CASE("a TCP frontend requires its certificates and mTLS CA", "[server]") {
  ServerOptions o;
  auto errors = parse(o, {"--server-port=8090", "--cluster-cert=c", "--cluster-key=k"});
  CHECK(mentions(errors, "--server-cert and --server-key"));
  CHECK(mentions(errors, "--server-ca-cert"));
}

TEST_CASE("lease flags: label set syntax and renew interval are checked", "[server]") {
  ServerOptions bad;
  auto errors = parse(bad, {"--uds-name=/tmp/s.sock", "--server-port=0", "--cluster-cert=c",
                            "--cluster-key=k", "--enable-lease-controller",
                            "--lease-label=k8s-app!=x,-bad=1", "--lease-renew-interval=100ms"});
  CHECK(mentions(errors, "--lease-label: label \"k8s-app!=x\": a label set takes key=value"));
  CHECK(mentions(errors, "--lease-label: label key \"-bad\""));
  CHECK(mentions(errors, "--lease-renew-interval"));
  ServerOptions ok;
  CHECK(parse(ok, {"--uds-name=/tmp/s.sock", "--server-port=0", "--cluster-cert=c",
                   "--cluster-key=k", "--enable-lease-controller", "--lease-renew-interval=2s"})
            .empty());
  CHECK(ok.lease_label == "k8s-app=konnectivity-server");
  CHECK(ok.lease_renew_interval == std::chrono::seconds(2));
}

TEST_CASE("limits have operator defaults, 0 lifts them, and bad values are refused", "[server]") {
  ServerOptions d;
  const std::vector<std::string> base{"--uds-name=/tmp/x.sock", "--server-port=0",
                                      "--cluster-cert=c", "--cluster-key=k"};
  CHECK(parse(d, base).empty());
  CHECK(d.max_frontend_streams == 50000);
  CHECK(d.max_pending_dials == 10000);
  CHECK(d.max_pending_dials_per_agent == 2000);
  CHECK(d.max_tunnels_per_agent == 20000);
  CHECK(d.http_connect_max_header_bytes == 65536);
  CHECK(d.tls_handshake_timeout == std::chrono::seconds(10));
  CHECK(d.dial_request_timeout == std::chrono::seconds(60));
  auto with = [&](std::vector<std::string> extra) {
    ServerOptions o;
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return parse(o, args);
  };
  CHECK(with({"--max-frontend-streams=0", "--max-pending-dials=0"}).empty());
  CHECK(mentions(with({"--max-tunnels-per-agent=-1"}), "--max-tunnels-per-agent"));
  CHECK(mentions(with({"--http-connect-max-header-bytes=10"}), "at least 1024"));
  CHECK(mentions(with({"--tls-handshake-timeout=0s"}), "--tls-handshake-timeout"));
  CHECK(mentions(with({"--dial-request-timeout=0s"}), "--dial-request-timeout"));
}

TEST_CASE("identifier verification needs client certificates", "[server]") {
  ServerOptions o;
  auto errors = parse(o, {"--uds-name=/tmp/x.sock", "--server-port=0", "--cluster-cert=c",
                          "--cluster-key=k", "--verify-agent-identifiers=cert"});
  CHECK(mentions(errors, "needs --cluster-ca-cert"));
  ServerOptions ok;
  CHECK(parse(ok, {"--uds-name=/tmp/x.sock", "--server-port=0", "--cluster-cert=c",
                   "--cluster-key=k", "--cluster-ca-cert=ca", "--verify-agent-identifiers=cert",
                   "--route-agent-names=gateway,edge"})
            .empty());
  CHECK(ok.route_agent_names == std::vector<std::string>{"gateway", "edge"});
  ServerOptions bad;
  CHECK(mentions(parse(bad, {"--uds-name=/tmp/x.sock", "--server-port=0", "--cluster-cert=c",
                             "--cluster-key=k", "--verify-agent-identifiers=token"}),
                 "must be none or cert"));
}

TEST_CASE("tunnel bounds: CONNECT half-close off, half-close timeout 30s, idle timeout off",
          "[server]") {
  const std::vector<std::string> base{"--uds-name=/tmp/x.sock", "--server-port=0",
                                      "--cluster-cert=c", "--cluster-key=k"};
  ServerOptions d;
  CHECK(parse(d, base).empty());
  CHECK_FALSE(d.http_connect_half_close);
  CHECK(d.half_close_timeout == std::chrono::seconds(30));
  CHECK(d.tunnel_idle_timeout.count() == 0);
  auto with = [&](std::vector<std::string> extra, ServerOptions& o) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return parse(o, args);
  };
  ServerOptions on;
  CHECK(with({"--http-connect-half-close", "--half-close-timeout=1s", "--tunnel-idle-timeout=5m"},
             on)
            .empty());
  CHECK(on.http_connect_half_close);
  CHECK(on.half_close_timeout == std::chrono::seconds(1));
  CHECK(on.tunnel_idle_timeout == std::chrono::minutes(5));
  ServerOptions bad;
  auto errors = with({"--half-close-timeout=0s", "--tunnel-idle-timeout=-1s"}, bad);
  CHECK(mentions(errors, "--half-close-timeout"));
  CHECK(mentions(errors, "--tunnel-idle-timeout"));
}

TEST_CASE("a tunnel's quiet limit: --half-close-timeout once half-closed, the idle limit when shorter",
          "[server]") {
  using std::chrono::seconds;
  ServerOptions o;
  CHECK(o.quiet_limit(false) == seconds(0));  // no idle limit by default, as upstream
  CHECK(o.quiet_limit(true) == seconds(30));
  CHECK(o.quiet_reason(true) == "half-closed tunnel quiet for 30s (--half-close-timeout)");
  o.tunnel_idle_timeout = seconds(10);
  CHECK(o.quiet_limit(false) == seconds(10));
  CHECK(o.quiet_limit(true) == seconds(10));
  CHECK(o.quiet_reason(false) == "idle tunnel quiet for 10s (--tunnel-idle-timeout)");
  o.tunnel_idle_timeout = seconds(60);
  CHECK(o.quiet_limit(true) == seconds(30));
}

TEST_CASE("node-to-control-plane destinations are HOST:PORT, off by default", "[server]") {
  ServerOptions d;
  CHECK(parse(d, {"--uds-name=/tmp/s.sock", "--server-port=0", "--cluster-cert=c",
                  "--cluster-key=k"})
            .empty());
  CHECK(d.node_to_control_plane_destinations.empty());
  CHECK(d.max_node_to_control_plane_connections == 10000);

  ServerOptions o;
  CHECK(parse(o, {"--uds-name=/tmp/s.sock", "--server-port=0", "--cluster-cert=c",
                  "--cluster-key=k",
                  "--node-to-control-plane-destinations=127.0.0.1:6443,[::1]:6443",
                  "--max-node-to-control-plane-connections=0",
                  "--node-to-control-plane-dial-timeout=2s"})
            .empty());
  CHECK(o.node_to_control_plane_destinations ==
        std::vector<std::string>{"127.0.0.1:6443", "[::1]:6443"});
  CHECK(o.max_node_to_control_plane_connections == 0);

  ServerOptions bad;
  auto errors = parse(bad, {"--uds-name=/tmp/s.sock", "--server-port=0", "--cluster-cert=c",
                            "--cluster-key=k", "--node-to-control-plane-destinations=apiserver",
                            "--max-node-to-control-plane-connections=-2",
                            "--node-to-control-plane-dial-timeout=0s"});
  CHECK(mentions(errors, "--node-to-control-plane-destinations: \"apiserver\" is not HOST:PORT"));
  CHECK(mentions(errors, "--max-node-to-control-plane-connections"));
  CHECK(mentions(errors, "--node-to-control-plane-dial-timeout"));
  CHECK(errors.size() == 3);
}

TEST_CASE("agent-choice flag: least-loaded by default, random on request, nothing else",
          "[server][strategy]") {
  const std::vector<std::string> base{"--uds-name=/tmp/s.sock", "--server-port=0",
                                      "--cluster-cert=c", "--cluster-key=k"};
  ServerOptions d;
  CHECK(parse(d, base).empty());
  CHECK(d.agent_choice == "least-loaded");
  ServerOptions r;
  auto args = base;
  args.push_back("--agent-choice=random");
  CHECK(parse(r, args).empty());
  CHECK(r.agent_choice == "random");
  ServerOptions bad;
  args.back() = "--agent-choice=fastest";
  auto errors = parse(bad, args);
  CHECK(mentions(errors, "--agent-choice: unknown choice \"fastest\" (want least-loaded, random)"));
  CHECK(errors.size() == 1);
}

TEST_CASE("the kubeconfig qps takes a decimal, and a positive qps needs a burst (client-go)",
          "[server]") {
  const std::vector<std::string> base{"--uds-name=/tmp/s.sock", "--server-port=0",
                                      "--cluster-cert=c", "--cluster-key=k"};
  auto with = [&](std::vector<std::string> extra) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  ServerOptions decimal;
  CHECK(parse(decimal, with({"--kubeconfig-qps=2.5", "--kubeconfig-burst=4"})).empty());
  CHECK(decimal.kubeconfig_qps == 2.5);
  CHECK(decimal.kubeconfig_burst == 4);
  ServerOptions off;
  CHECK(parse(off, with({"--kubeconfig-qps=-1"})).empty());
  ServerOptions no_burst;
  CHECK(mentions(parse(no_burst, with({"--kubeconfig-qps=20"})),
                 "--kubeconfig-burst: must be set (greater than 0) when --kubeconfig-qps"));
  ServerOptions negative;
  CHECK(mentions(parse(negative, with({"--kubeconfig-burst=-3"})), "--kubeconfig-burst"));
  ServerOptions junk;
  CHECK(mentions(parse(junk, with({"--kubeconfig-qps=fast"})), "invalid number \"fast\""));
}

TEST_CASE("contention profiling needs --enable-profiling too, as upstream", "[server]") {
  const std::vector<std::string> base{"--uds-name=/tmp/s.sock", "--server-port=0",
                                      "--cluster-cert=c", "--cluster-key=k"};
  auto with = [&](const std::string& extra) {
    auto args = base;
    args.push_back(extra);
    return args;
  };
  ServerOptions alone;
  CHECK(mentions(parse(alone, with("--enable-contention-profiling")),
                 "--enable-contention-profiling: needs --enable-profiling"));
  ServerOptions both;
  auto args = with("--enable-profiling");
  args.push_back("--enable-contention-profiling");
  CHECK(parse(both, args).empty());
  CHECK(both.enable_profiling);
}

TEST_CASE("kube-api-content-type: a warning when protobuf is asked for and the apiserver is "
          "called",
          "[server]") {
  const std::vector<std::string> base{"--uds-name=/tmp/s.sock", "--server-port=0",
                                      "--cluster-cert=c", "--cluster-key=k"};
  const std::vector<std::vector<std::string>> callers{
      {"--enable-lease-controller"},
      {"--agent-namespace=kube-system", "--agent-service-account=konnectivity-agent",
       "--authentication-audience=system:konnectivity-server"}};
  for (const auto& uses : callers) {
    INFO(uses[0]);
    auto args = base;
    args.insert(args.end(), uses.begin(), uses.end());
    ServerOptions o;
    REQUIRE(parse(o, args).empty());
    CHECK(mentions(o.warnings(),
                   "--kube-api-content-type=application/vnd.kubernetes.protobuf is not used"));
    args.push_back("--kube-api-content-type=application/json");
    ServerOptions json;
    REQUIRE(parse(json, args).empty());
    CHECK(json.warnings().empty());
  }
  ServerOptions none;
  REQUIRE(parse(none, base).empty());
  CHECK(none.warnings().empty());
}

TEST_CASE("frontend-write-channel-size (upstream PR #896): 0 or more, unused", "[server]") {
  const std::vector<std::string> base{"--uds-name=/tmp/s.sock", "--server-port=0",
                                      "--cluster-cert=c", "--cluster-key=k"};
  ServerOptions d;
  REQUIRE(parse(d, base).empty());
  CHECK(d.frontend_write_channel_size == 10);  // upstream's default
  for (const char* ok : {"--frontend-write-channel-size=0", "--frontend-write-channel-size=64"}) {
    INFO(ok);
    auto args = base;
    args.push_back(ok);
    ServerOptions o;
    CHECK(parse(o, args).empty());
  }
  auto args = base;
  args.push_back("--frontend-write-channel-size=-1");
  ServerOptions bad;
  CHECK(mentions(parse(bad, args), "--frontend-write-channel-size: must be 0 or more, got -1"));
  auto word = base;
  word.push_back("--frontend-write-channel-size=many");
  ServerOptions not_int;
  CHECK(mentions(parse(not_int, word), "frontend-write-channel-size"));
}

TEST_CASE("values upstream accepts are accepted with its meaning and a warning", "[server]") {
  const std::vector<std::string> base{"--uds-name=/tmp/s.sock", "--server-port=0",
                                      "--cluster-cert=c", "--cluster-key=k"};
  SECTION("--server-count 0 or less: agents are told the count is unknown") {
    for (const char* v : {"--server-count=0", "--server-count=-1"}) {
      INFO(v);
      auto args = base;
      args.push_back(v);
      ServerOptions o;
      CHECK(parse(o, args).empty());
      CHECK(mentions(o.warnings(), "agents are told the number of servers is unknown"));
    }
  }
  SECTION("--lease-label with a key twice: the last value, as upstream's ParseLabels") {
    auto args = base;
    args.insert(args.end(), {"--enable-lease-controller", "--lease-label=k8s-app=a,k8s-app=b"});
    ServerOptions o;
    CHECK(parse(o, args).empty());
    CHECK(mentions(o.warnings(),
                   "--lease-label: label key \"k8s-app\" given twice: the last value, \"b\""));
  }
  SECTION("what upstream refuses stays refused") {
    // ParseLabels refuses an empty or blank label set: nothing to find the leases by.
    for (const char* v : {"--lease-label=", "--lease-label= "}) {
      INFO(v);
      auto args = base;
      args.insert(args.end(), {"--enable-lease-controller", v});
      ServerOptions o;
      CHECK(mentions(parse(o, args), "--lease-label: at least one label"));
    }
  }
  ServerOptions plain;
  REQUIRE(parse(plain, base).empty());
  CHECK(plain.warnings().empty());
}
