// Security (issue 8 item 5), through real sockets: the agent's --allowed-destinations and its
// refusal of protocols other than tcp, agent identifiers checked against client certificates,
// unix socket modes, no secret in logs or metrics, and no TLS below 1.2 on any listener or client.
#include <fstream>
#include <sys/stat.h>
#include <thread>

#include <catch2/catch.hpp>
#include <grpcpp/client_context.h>

#include "core/tunnel/packet.h"
#include "test-client/tunnel.h"
#include "tests/integration/ha/ha_fleet.h"
#include "tests/integration/security/security_util.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/support/echo_server.h"
#include "tests/support/fake_apiserver.h"
#include "tests/support/http_server.h"
#include "tests/support/loopback.h"

using namespace konn::e2e;
using konn::testclient::Tunnel;
using konn::testsupport::eventually;

namespace {

const std::string kNotAllowed = "not allowed by the agent's --allowed-destinations";

double refused(const FleetAgent& a, const std::string& reason) {
  return a.metric("konn_agent_dials_refused_total", {{"reason", reason}}).value_or(-1);
}

// A server and one agent with `agent_args`, ready.
struct Pair {
  konn::testsupport::TempDir dir{"konn-security"};
  FleetServer server;
  std::unique_ptr<FleetAgent> agent;
  Pair(const std::string& id, std::vector<std::string> server_args,
       std::vector<std::string> agent_args)
      : server(konn::testsupport::test_certs(), id, std::move(server_args)) {
    server.start();
    agent = std::make_unique<FleetAgent>(dir, konn::testsupport::test_certs(), "a1",
                                         server.agent_port(), std::move(agent_args));
    REQUIRE(eventually([&] { return server.ready_agents() == 1; }, 20s));
  }
};

// One DIAL_REQ with `protocol` on a fresh frontend stream; the DIAL_RSP's error.
std::string dial_with_protocol(const FleetServer& s, const std::string& protocol,
                               const std::string& address) {
  auto stub = ProxyService::NewStub(s.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  auto stream = stub->Proxy(&ctx);
  stream->Write(konn::core::tunnel::make_dial_request(address, 4242, protocol));
  Packet rsp;
  std::string error = "(no DIAL_RSP)";
  while (stream->Read(&rsp)) {
    if (rsp.type() == DIAL_RSP) {
      error = rsp.dialresponse().error();
      break;
    }
  }
  ctx.TryCancel();
  stream->Finish();
  return error;
}

}  // namespace

// reliability: proxy-agent | dial to 169.254.169.254, its IPv4-mapped form, fe80::1, fd00:ec2::254
// reliability+: | DIAL_RSP error "... not allowed by the agent's --allowed-destinations" | warn
// reliability+: "dial refused: dial tcp 169.254.169.254:80: destination 169.254.169.254 not allowed
// reliability+: ..." | other destinations dial
TEST_CASE("security: by default the agent refuses the cloud metadata addresses",
          "[e2e][security]") {
  KONN_REQUIRE_DAEMONS();
  konn::testsupport::EchoServer echo;
  Pair p("meta", {}, {});
  auto ch = p.server.channel();
  int n = 0;
  for (const char* target : {"169.254.169.254:80", "[::ffff:169.254.169.254]:80", "[fe80::1]:80",
                             "[fd00:ec2::254]:80"}) {
    INFO(target);
    auto d = Tunnel::dial(ch, target, 10s);
    CHECK_FALSE(d.tunnel);
    CHECK(d.error.find(kNotAllowed) != std::string::npos);
    ++n;
  }
  CHECK(refused(*p.agent, "destination") == n);
  CHECK(p.agent->process().count_in_log("dial refused: dial tcp 169.254.169.254:80: destination "
                                        "169.254.169.254 not allowed") == 1);
  // Everything else goes through.
  auto d = Tunnel::dial(ch, echo.address(), 10s);
  CHECK(d.tunnel);
}

// reliability: proxy-agent | dial to a name with refused addresses, or to a port outside an
// reliability+: --allowed-destinations list | DIAL_RSP error "... not allowed ...", refused
// reliability+: addresses never dialled | warn "dial refused: ..." | allowed addresses and
// reliability+: host:port dial
TEST_CASE("security: destinations are checked after name resolution, on every address",
          "[e2e][security]") {
  KONN_REQUIRE_DAEMONS();
  konn::testsupport::EchoServer echo;  // on 127.0.0.1
  std::string port = std::to_string(echo.port());
  SECTION("a name whose every address is refused never connects") {
    Pair p("dns-all", {}, {"--allowed-destinations=*,!127.0.0.0/8,!::1"});
    auto d = Tunnel::dial(p.server.channel(), "localhost:" + port, 10s);
    CHECK_FALSE(d.tunnel);
    CHECK(d.error.find("dial tcp localhost:" + port + ": destination ") != std::string::npos);
    CHECK(d.error.find(kNotAllowed) != std::string::npos);
    CHECK(echo.accepted() == 0);
  }
  SECTION("only the allowed addresses of a name are dialled") {
    // localhost is 127.0.0.1 (where the echo listens) and maybe ::1 (nothing listens): with
    // 127.0.0.1 refused, the dial may try ::1 only, and never reaches the echo.
    Pair p("dns-some", {}, {"--allowed-destinations=*,!127.0.0.1"});
    auto d = Tunnel::dial(p.server.channel(), "localhost:" + port, 10s);
    CHECK_FALSE(d.tunnel);
    CHECK(echo.accepted() == 0);
    auto direct = Tunnel::dial(p.server.channel(), "127.0.0.1:" + port, 10s);
    CHECK(direct.error.find(kNotAllowed) != std::string::npos);
  }
  SECTION("an allow list with ports") {
    konn::testsupport::HttpServer http;  // another port on 127.0.0.1: not allowed
    Pair p("allow-list", {}, {"--allowed-destinations=127.0.0.1:" + port});
    auto ok = Tunnel::dial(p.server.channel(), echo.address(), 10s);
    CHECK(ok.tunnel);
    auto no = Tunnel::dial(p.server.channel(), http.address(), 10s);
    CHECK(no.error.find(kNotAllowed) != std::string::npos);
    CHECK(refused(*p.agent, "destination") == 1);
  }
}

// reliability: proxy-server | CONNECT to a destination the agent refuses | `HTTP/1.1 403 Forbidden`
// reliability+: with the agent's reason | server info "dial to ... failed: ..."; agent warn "dial
// reliability+: refused: ..." | server and agent
TEST_CASE("security: a refused destination is HTTP 403 through the CONNECT frontend",
          "[e2e][security]") {
  KONN_REQUIRE_DAEMONS();
  Pair p("connect-403", {"--mode=http-connect"}, {});
  UnixConnectClient c;
  REQUIRE(c.open(p.server.uds_path()));
  CHECK(connect_status(c, "169.254.169.254:80") == "HTTP/1.1 403 Forbidden");
  CHECK(c.read_to_end(5s).find(kNotAllowed) != std::string::npos);
}

// reliability: proxy-agent | DIAL_REQ with protocol udp, unix, tcp4, ip:icmp or empty | DIAL_RSP
// reliability+: error "dial udp ...: unknown network udp" | warn "... dial refused: protocol ...
// reliability+: (only tcp is dialled)" | agent; a tcp dial works, nothing reached the destination
TEST_CASE("security: the agent dials tcp only", "[e2e][security]") {
  KONN_REQUIRE_DAEMONS();
  konn::testsupport::EchoServer echo;
  Pair p("protocols", {}, {});
  int n = 0;
  for (const char* protocol : {"udp", "unix", "tcp4", "ip:icmp", ""}) {
    INFO("protocol \"" << protocol << "\"");
    std::string address =
        std::string(protocol) == "unix" ? "/run/containerd/containerd.sock" : echo.address();
    CHECK(dial_with_protocol(p.server, protocol, address) ==
          "dial " + std::string(protocol) + " " + address + ": unknown network " + protocol);
    ++n;
  }
  CHECK(refused(*p.agent, "protocol") == n);
  CHECK(echo.accepted() == 0);
  CHECK(p.agent->process().count_in_log("(only tcp is dialled)") == static_cast<size_t>(n));
  CHECK(dial_with_protocol(p.server, "tcp", echo.address()).empty());
}

TEST_CASE(
    "security: with --verify-agent-identifiers=cert an agent claims only what its "
    "certificate proves",
    "[e2e][security]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-identity"};
  auto [node_crt, node_key] =
      issue_client_cert(certs, dir, "node-a", "system:node:node-a", "DNS:node-a,IP:10.0.0.5");
  auto [gw_crt, gw_key] = issue_client_cert(certs, dir, "gateway", "gateway", "DNS:gateway");
  auto agent = [&](const std::string& id, uint16_t port, const std::string& crt,
                   const std::string& key, const std::string& identifiers) {
    return std::make_unique<FleetAgent>(
        dir, certs, id, port,
        std::vector<std::string>{"--agent-cert=" + crt, "--agent-key=" + key,
                                 "--agent-identifiers=" + identifiers});
  };
  // reliability: proxy-server | agent claiming identifiers its certificate does not prove
  // reliability+: (--verify-agent-identifiers=cert) | stream ends `PERMISSION_DENIED` "agent
  // reliability+: identifiers not proven by its certificate ..." | warn "agent liar from ...
  // reliability+: rejected: identifiers not proven by its certificate (CN ...): host=node-b
  // reliability+: (--verify-agent-identifiers=cert)" | honest agents routed; the refused agent
  // reliability+: retries
  SECTION("checked") {
    FleetServer s(certs, "verify",
                  {"--verify-agent-identifiers=cert", "--route-agent-names=gateway",
                   "--proxy-strategies=destHost,defaultRoute"});
    s.start();
    auto honest = agent("honest", s.agent_port(), node_crt, node_key, "host=node-a&ipv4=10.0.0.5");
    auto liar = agent("liar", s.agent_port(), node_crt, node_key, "host=node-a&host=node-b");
    auto router = agent("router", s.agent_port(), node_crt, node_key, "default-route=true");
    auto gateway =
        agent("gateway", s.agent_port(), gw_crt, gw_key, "default-route=true&cidr=10.0.0.0/8");
    auto& log = s.process();
    CHECK(log.wait_for_log("agent connected agentID=honest ", 20s));
    CHECK(log.wait_for_log("agent connected agentID=gateway ", 20s));
    CHECK(log.wait_for_log("agent liar from", 20s));
    CHECK(log.count_in_log("identifiers not proven by its certificate (CN system:node:node-a): "
                           "host=node-b (--verify-agent-identifiers=cert)") >= 1);
    CHECK(log.wait_for_log("agent router from", 20s));
    CHECK(log.count_in_log("(CN system:node:node-a): default-route=true") >= 1);
    CHECK(log.count_in_log("agent connected agentID=liar ") == 0);
    CHECK(log.count_in_log("agent connected agentID=router ") == 0);
    CHECK(s.metric(kServer + "agents_rejected_total", {{"reason", "identifiers"}}).value_or(0) >=
          2);
    // The refused agent is told why, and keeps trying (backing off).
    CHECK(liar->process().wait_for_log("not proven by its certificate", 20s));
    CHECK(liar->process().running());
    // honest's host and ipv4 and gateway's cidr for destHost (distinct identifiers, as
    // upstream counts them); gateway alone for defaultRoute.
    CHECK(s.metric(kServer + "ready_backends", {{"proxy_strategy", "destHost"}}) == 3);
    CHECK(s.metric(kServer + "ready_backends", {{"proxy_strategy", "defaultRoute"}}) == 1);
  }
  SECTION("off (the default, as upstream): identifiers are trusted as sent") {
    FleetServer s(certs, "trusting", {"--proxy-strategies=destHost"});
    s.start();
    auto liar = agent("liar", s.agent_port(), node_crt, node_key, "host=node-b");
    CHECK(s.process().wait_for_log("agent connected agentID=liar ", 20s));
  }
}

TEST_CASE("security: unix sockets are created 0770 whatever the umask", "[e2e][security]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  for (const char* mode : {"--mode=grpc", "--mode=http-connect"}) {
    INFO(mode);
    mode_t old = ::umask(0);  // the child inherits the most permissive umask
    FleetServer s(certs, "uds", {mode});
    s.start();
    ::umask(old);
    struct stat st {};
    REQUIRE(::stat(s.uds_path().c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK((st.st_mode & 07777) == 0770);
  }
}

// reliability: proxy-server | agent with a token the apiserver rejects, everything at --v=10 |
// reliability+: `UNAUTHENTICATED` | warn "agent bad from ... rejected: ...", no token, credential
// reliability+: or key in any log or /metrics | the good agent serves a tunnel
TEST_CASE("security: no token, credential or key in any log line or metric", "[e2e][security]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-secrets"};
  konn::testsupport::EchoServer echo;
  const std::string agent_token = "agent-token-9f3c1d";
  const std::string server_token = "server-kubeconfig-token-77ab";
  konn::testsupport::FakeApiserver api(certs.server_crt, certs.server_key, server_token);
  api.set_token(agent_token, {konn::testsupport::FakeApiserver::Answer::Authenticated,
                              "system:serviceaccount:kube-system:konnectivity-agent"});
  api.set_token("rejected-token-0a1b",
                {konn::testsupport::FakeApiserver::Answer::Unauthenticated, ""});
  std::string kubeconfig = api.write_kubeconfig(dir.path(), certs.ca_crt);
  std::ofstream(dir.file("token")) << agent_token;
  std::ofstream(dir.file("bad-token")) << "rejected-token-0a1b";
  // The most verbose logs both daemons have; token authentication, leases on both sides.
  FleetServer s(
      certs, "secrets",
      {"--v=10", "--cluster-ca-cert=", "--agent-namespace=kube-system",
       "--agent-service-account=konnectivity-agent",
       "--authentication-audience=system:konnectivity-server", "--kubeconfig=" + kubeconfig,
       "--enable-lease-controller", "--lease-renew-interval=1s"});
  s.start();
  std::vector<std::string> agent_args = {
      "--v=10", "--service-account-token-path=" + dir.file("token"), "--count-server-leases",
      "--lease-poll-interval=1s", "--kubeconfig=" + kubeconfig};
  FleetAgent good(dir, certs, "good", s.agent_port(), agent_args);
  FleetAgent bad(dir, certs, "bad", s.agent_port(),
                 {"--v=10", "--service-account-token-path=" + dir.file("bad-token")});
  REQUIRE(eventually([&] { return s.ready_agents() == 1; }, 20s));
  REQUIRE(s.process().wait_for_log("agent bad from", 20s));
  // The agent's lease list and watch ran (and were logged at --v=10).
  REQUIRE(eventually(
      [&] { return api.lease_calls("list-from-cache") >= 1 && api.open_watches() >= 1; }, 20s));
  auto d = Tunnel::dial(s.channel(), echo.address(), 10s);
  REQUIRE(d.tunnel);
  d.tunnel->close(5s);
  // Key material: the body lines of every private key in use.
  std::vector<std::string> secrets = {agent_token, server_token, "rejected-token-0a1b"};
  for (const auto& key : {certs.server_key, certs.agent_key}) {
    std::ifstream in(key);
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("-----") == std::string::npos && line.size() > 16) secrets.push_back(line);
    }
  }
  std::vector<std::pair<std::string, std::string>> texts = {
      {"server log", s.process().log()},
      {"good agent log", good.process().log()},
      {"bad agent log", bad.process().log()},
      {"server /metrics", http_get_local(s.health_port(), "/metrics").body},
      {"agent /metrics", http_get_local(good.health_port(), "/metrics").body}};
  for (const auto& [what, text] : texts) {
    INFO(what);
    CHECK(text.size() > 1000);  // there is something to look at
    for (const auto& secret : secrets) {
      INFO("secret " << secret);
      CHECK(text.find(secret) == std::string::npos);
    }
  }
}

// reliability: proxy-server | TLS 1.1 client on the agent port, the gRPC and the CONNECT TLS
// reliability+: frontends | handshake refused (TLS 1.2 accepted) | CONNECT: info "http-connect
// reliability+: client ...: TLS handshake failed: ..."; gRPC: info "agent ADDR: TLS handshake
// reliability+: failed: ..." (or "frontend ADDR: ...") | server
// reliability: proxy-agent | proxy-server and apiserver that speak only TLS 1.1 | agent refuses
// reliability+: both handshakes | warn "cannot connect to proxy-server ..." and "cannot list server
// reliability+: leases (TLS handshake with ...)" | agent, with 0 servers, retrying
TEST_CASE("security: TLS below 1.2 is refused by every listener and client", "[e2e][security]") {
  KONN_REQUIRE_DAEMONS();
  const auto& certs = konn::testsupport::test_certs();
  konn::testsupport::TempDir dir{"konn-tls"};
  // An old client (TLS 1.1 allowed by lowering OpenSSL's security level, as it would be on an
  // old system) against the agent port, the gRPC TCP frontend and the CONNECT TLS frontend.
  const std::string old_client = "-tls1_1 -cipher ALL@SECLEVEL=0";
  for (const char* mode : {"--mode=grpc", "--mode=http-connect"}) {
    INFO(mode);
    FleetServer s(certs, "tls", {mode});
    uint16_t frontend = s.use_tcp_frontend();
    s.start();
    for (uint16_t port : {s.agent_port(), frontend}) {
      INFO("port " << port);
      auto modern = openssl_handshake(port, "-tls1_2", certs);
      INFO(modern.output);
      CHECK(modern.ok);  // the check itself can see a handshake succeed
      auto old = openssl_handshake(port, old_client, certs);
      INFO(old.output);
      CHECK_FALSE(old.ok);
    }
  }
  // Clients: a TLS 1.1-only server is refused by the agent's stream to the proxy-server and by
  // its apiserver client (the lease list), both of which offer TLS 1.2 and up only.
  uint16_t port = konn::testsupport::free_tcp_port();
  konn::testsupport::ProcessOptions o;
  o.binary = "sh";
  o.search_path = true;
  o.log_path = dir.file("s_server.log");
  o.args = {"-c", "sleep 60 | openssl s_server -accept 127.0.0.1:" + std::to_string(port) +
                      " -tls1_1 -cipher ALL@SECLEVEL=0 -cert " + certs.server_crt + " -key " +
                      certs.server_key};
  konn::testsupport::Process old_server(std::move(o));
  REQUIRE(old_server.wait_for_tcp_port(port, 10s));
  // The control: an old client does get through to this old server.
  REQUIRE(openssl_handshake(port, old_client, certs).ok);
  std::ofstream(dir.file("kubeconfig"))
      << "apiVersion: v1\nkind: Config\nclusters:\n- name: old\n  cluster:\n"
      << "    server: https://127.0.0.1:" << port << "\n    certificate-authority: " << certs.ca_crt
      << "\nusers:\n- name: u\n  user:\n    token: t\n"
      << "contexts:\n- name: old\n  context:\n    cluster: old\n    user: u\n"
      << "current-context: old\n";
  FleetAgent a(dir, certs, "a1", port,
               {"--count-server-leases", "--lease-poll-interval=1s",
                "--kubeconfig=" + dir.file("kubeconfig")});
  CHECK(a.process().wait_for_log("cannot connect to proxy-server", 20s));
  CHECK(a.process().wait_for_log("cannot list server leases (TLS handshake with", 20s));
  CHECK(a.servers() == 0);
  auto server_log = old_server.log();
  INFO(server_log);
  CHECK(server_log.find("unsupported protocol") != std::string::npos);
}
