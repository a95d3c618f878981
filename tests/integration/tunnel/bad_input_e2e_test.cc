// End-to-end robustness: malformed bytes and packets, untrusted or duplicate agents, bad flags.
// After each abuse the daemon must still be running and serving dials.
#include <arpa/inet.h>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <sstream>
#include <thread>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>

#include "core/tunnel/packet.h"
#include "konnectivity/agent.grpc.pb.h"
#include "konnectivity/client.grpc.pb.h"
#include "test-client/grpc_credentials.h"
#include "test-client/http_get.h"
#include "test-client/tunnel.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/integration/tunnel/e2e_util.h"
#include "tests/integration/tunnel/fake_agent.h"
#include "tests/integration/tunnel/tunnel_stack.h"

using namespace konn::e2e;
using konn::core::tunnel::describe;
using konn::testclient::http_get;
using konn::testclient::Tunnel;
using konn::testsupport::ProcessOptions;
using konn::testsupport::run_process;
using konn::testsupport::TempDir;
using Clock = std::chrono::steady_clock;

namespace {

// The stack still serves: the process runs and a page comes through a fresh channel.
void check_still_serving(TunnelStack& s) {
  REQUIRE(s.server.running());
  auto d = Tunnel::dial(s.server.new_channel(), s.http.address(), 5s);
  REQUIRE(d.error.empty());
  auto r = http_get(*d.tunnel, s.http.address(), "/hello", 10s);
  CHECK(r.body == "hello through the tunnel\n");
  d.tunnel->close(5s);
}

// Writes `bytes` to a connected fd, then reads until EOF or `timeout`; returns whether the peer
// closed the connection.
bool send_and_expect_close(int fd, const std::string& bytes, int timeout_ms) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return true;  // the peer already closed
    off += static_cast<size_t>(n);
  }
  char buf[4096];
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;
  }
}

int connect_unix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int connect_tcp(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `packets` on a fresh frontend stream, half-closes, and collects the answer until the
// stream ends (bounded by a deadline). Returns a one-line summary of what came back.
struct Exchange {
  std::vector<Packet> received;
  grpc::Status status;
  std::string summary() const {
    std::ostringstream out;
    for (const auto& p : received) out << describe(p) << "; ";
    out << "status " << status.error_code() << " " << status.error_message();
    return out.str();
  }
};

// With `await_dial_rsp`, the half-close waits until a DIAL_RSP arrived (or the stream ended).
template <typename Stub, typename Call>
Exchange exchange(Stub& stub, const std::vector<Packet>& packets, Call open,
                  std::chrono::milliseconds deadline, bool await_dial_rsp = false) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  auto stream = open(stub, &ctx);
  for (const auto& p : packets) {
    if (!stream->Write(p)) break;
  }
  Exchange e;
  Packet in;
  if (await_dial_rsp) {
    while (stream->Read(&in)) {
      e.received.push_back(in);
      if (in.type() == DIAL_RSP) break;
    }
  }
  stream->WritesDone();
  while (stream->Read(&in)) e.received.push_back(in);
  e.status = stream->Finish();
  return e;
}

Exchange frontend_exchange(const std::shared_ptr<grpc::Channel>& channel,
                           const std::vector<Packet>& packets, bool await_dial_rsp) {
  auto stub = ProxyService::NewStub(channel);
  return exchange(
      *stub, packets, [](auto& st, grpc::ClientContext* ctx) { return st.Proxy(ctx); }, 5s,
      await_dial_rsp);
}

Packet bare(PacketType type) {
  Packet p;
  p.set_type(type);
  return p;
}

}  // namespace

// reliability: proxy-server | 64 KiB of random bytes, an HTTP/1.1 GET, or an HTTP/2 preface then
// reliability+: garbage on the gRPC frontend socket | GOAWAY PROTOCOL_ERROR, connection closed |
// reliability+: warn "frontend unix #N sent GOAWAY: PROTOCOL_ERROR", info "frontend unix #N closed:
// reliability+: ..." | server serves a page, a new agent connects
// reliability: proxy-server | random bytes, or a TLS ClientHello cut short, on the agent port
// reliability+: (mTLS) | connection closed | info "agent ADDR: TLS handshake failed: ..." | server
// reliability+: serves a page, a new agent connects
TEST_CASE("e2e: garbage bytes on the unix socket and on the agent port", "[e2e][bad-input]") {
  KONN_REQUIRE_DAEMONS();
  TunnelStack s;
  std::string junk = random_bytes(64 * 1024, 99);
  SECTION("random bytes on the frontend socket") {
    int fd = connect_unix(s.server.uds_path());
    REQUIRE(fd >= 0);
    CHECK(send_and_expect_close(fd, junk, 5000));
    ::close(fd);
  }
  SECTION("an HTTP/1.1 request on the frontend socket") {
    int fd = connect_unix(s.server.uds_path());
    REQUIRE(fd >= 0);
    CHECK(send_and_expect_close(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 5000));
    ::close(fd);
  }
  SECTION("an HTTP/2 preface followed by garbage on the frontend socket") {
    int fd = connect_unix(s.server.uds_path());
    REQUIRE(fd >= 0);
    CHECK(send_and_expect_close(fd, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + junk, 5000));
    ::close(fd);
  }
  SECTION("random bytes on the agent port") {
    int fd = connect_tcp(s.server.agent_port());
    REQUIRE(fd >= 0);
    CHECK(send_and_expect_close(fd, junk, 5000));
    ::close(fd);
  }
  SECTION("a TLS ClientHello cut short on the agent port") {
    int fd = connect_tcp(s.server.agent_port());
    REQUIRE(fd >= 0);
    // Record header announcing 512 bytes of handshake, then a few bytes and silence.
    std::string partial("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
    ::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL);
    ::close(fd);
  }
  check_still_serving(s);
  // The agent port still admits agents.
  AgentSpec late;
  late.id = "agent-late";
  auto agent = start_agent(s.dir, s.certs, s.server.agent_port(), late);
  CHECK(s.server.wait_agent_connected("agent-late", 10s));
}

// reliability: proxy-server | frontend DIAL_REQ without dialRequest | DIAL_RSP error "DIAL_REQ
// reliability+: without a dial request", stream finished | info "dial to ... failed: DIAL_REQ
// reliability+: without a dial request" | server serves a page through a fresh channel
// reliability: proxy-server | frontend DIAL_REQ with an empty address | DIAL_RSP error from the
// reliability+: agent | info "dial to ... failed at the agent: ..." | server serves a page through
// reliability+: a fresh channel
// reliability: proxy-server | frontend DATA before any dial, or for an unknown connectID | dropped;
// reliability+: stream finished after the half-close, well before the deadline | debug "DATA from
// reliability+: frontend dropped" | server serves a page through a fresh channel
// reliability: proxy-server | frontend CLOSE_REQ without payload or for an unknown connectID |
// reliability+: CLOSE_RSP "Unknown connectID", stream finished | nothing | server serves a page
// reliability+: through a fresh channel
// reliability: proxy-server | frontend DIAL_CLS without closeDial, DIAL_RSP, CLOSE_RSP, DRAIN or
// reliability+: packet type 99 | ignored; stream finished after the half-close, well before the
// reliability+: deadline | debug "unexpected packet from frontend ignored" (nothing for DIAL_CLS) |
// reliability+: server serves a page through a fresh channel
TEST_CASE("e2e: malformed packets from a frontend", "[e2e][bad-input]") {
  KONN_REQUIRE_DAEMONS();
  TunnelStack s;
  struct Case {
    const char* name;
    std::vector<Packet> packets;
    bool expect_dial_error = false;  // a DIAL_RSP with an error must come back
  };
  Packet unknown_type;
  unknown_type.set_type(static_cast<PacketType>(99));
  Packet dial_no_address = bare(DIAL_REQ);
  dial_no_address.mutable_dialrequest()->set_random(424242);
  dial_no_address.mutable_dialrequest()->set_protocol("tcp");
  Packet dial_bad_protocol =
      konn::core::tunnel::make_dial_request(s.http.address(), 515151, "sctp");
  std::vector<Case> cases = {
      {"DIAL_REQ without dialRequest", {bare(DIAL_REQ)}, true},
      {"DIAL_REQ with an empty address", {dial_no_address}, true},
      {"DIAL_REQ with protocol sctp", {dial_bad_protocol}, true},
      {"DATA without data as the first packet", {bare(DATA)}},
      {"DATA for an unknown connectID", {konn::core::tunnel::make_data(12345, "hello")}},
      {"CLOSE_REQ without closeRequest", {bare(CLOSE_REQ)}},
      {"CLOSE_REQ for an unknown connectID", {konn::core::tunnel::make_close_request(777)}},
      {"DIAL_CLS without closeDial", {bare(DIAL_CLS)}},
      {"DIAL_RSP from a frontend", {konn::core::tunnel::make_dial_response(1, 2)}},
      {"CLOSE_RSP and DRAIN from a frontend", {bare(CLOSE_RSP), bare(DRAIN)}},
      {"an unknown packet type", {unknown_type}},
  };
  for (const auto& c : cases) {
    auto start = Clock::now();
    Exchange e = frontend_exchange(s.channel, c.packets, c.expect_dial_error);
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    INFO(c.name << " -> " << e.summary());
    // A half-closed frontend stream must be finished by the server, not left to our deadline.
    CHECK(e.status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED);
    CHECK(took < 5s);
    if (c.expect_dial_error) {
      bool answered = false;
      for (const auto& p : e.received) {
        if (p.type() == DIAL_RSP && !p.dialresponse().error().empty()) answered = true;
      }
      CHECK(answered);
    }
    WARN(c.name << " -> " << e.summary());
    REQUIRE(s.server.running());
  }

  // reliability: proxy-server | DATA for another connectID on an established tunnel's stream |
  // reliability+: dropped, stream finished (no deadline) | debug "DATA from frontend dropped" |
  // reliability+: server serves a page through a fresh channel
  SECTION("a second connectID on an established tunnel's stream") {
    auto stub = ProxyService::NewStub(s.channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    auto stream = stub->Proxy(&ctx);
    REQUIRE(stream->Write(konn::core::tunnel::make_dial_request(s.echo.address(), 616161)));
    Packet rsp;
    REQUIRE(stream->Read(&rsp));
    REQUIRE(rsp.type() == DIAL_RSP);
    REQUIRE(rsp.dialresponse().error().empty());
    int64_t cid = rsp.dialresponse().connectid();
    REQUIRE(stream->Write(konn::core::tunnel::make_data(cid + 1000, "not mine")));
    REQUIRE(stream->Write(konn::core::tunnel::make_data(cid, "mine")));
    stream->WritesDone();
    std::vector<Packet> rest;
    Packet in;
    while (stream->Read(&in)) rest.push_back(in);
    grpc::Status st = stream->Finish();
    std::ostringstream what;
    for (const auto& p : rest) what << describe(p) << "; ";
    WARN("DATA for a foreign connectID on an established stream -> " << what.str() << "status "
                                                                     << st.error_code());
    CHECK(st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  check_still_serving(s);
}

TEST_CASE("e2e: malformed packets from an agent", "[e2e][bad-input]") {
  KONN_REQUIRE_DAEMONS();
  TunnelStack s;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto creds = konn::testclient::grpc_channel_credentials(s.certs.ca_crt, s.certs.agent_crt,
                                                          s.certs.agent_key);
  auto channel =
      grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(s.server.agent_port()), creds, args);
  auto stub = AgentService::NewStub(channel);
  auto open = [](auto& st, grpc::ClientContext* ctx) { return st.Connect(ctx); };

  // reliability: proxy-server | agent stream without an agentid header | stream ends `UNKNOWN`
  // reliability+: "expected one agent ID in the context, got 0" | warn "agent from ... rejected:
  // reliability+: expected one agentid header, got 0" | server serves a page through a fresh
  // reliability+: channel
  SECTION("a stream without an agentid header is refused") {
    Exchange e = exchange(*stub, {}, open, 5s);
    INFO(e.summary());
    CHECK_FALSE(e.status.ok());
    CHECK(e.status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED);
  }

  // reliability: proxy-server | agent DATA for an unknown connectID | CLOSE_REQ for that connectID
  // reliability+: | debug "DATA for unknown connection; closing it at the agent" | the agent
  // reliability+: stream; server serves a page through a fresh channel
  // reliability: proxy-server | agent DIAL_RSP that nobody dialled | CLOSE_REQ for its connectID |
  // reliability+: debug "DIAL_RSP for no pending dial (the frontend gave up)" | the agent stream;
  // reliability+: server serves a page through a fresh channel
  // reliability: proxy-server | agent DIAL_REQ, CLOSE_REQ, packet type 99, or DATA, DIAL_RSP,
  // reliability+: CLOSE_RSP, DIAL_CLS without payload | ignored | warn "[A...] unexpected packet
  // reliability+: from agent ignored" (nothing for the empty ones) | the agent stream until it ends
  // reliability+: (info "agent disconnected agentID=fake-agent")
  SECTION("packets a real agent never sends") {
    Packet unknown_type;
    unknown_type.set_type(static_cast<PacketType>(99));
    std::vector<Packet> packets = {
        bare(DIAL_RSP),
        konn::core::tunnel::make_dial_response(987654321, 5),  // nobody dialled this
        bare(DATA),
        konn::core::tunnel::make_data(999, "for nobody"),
        bare(CLOSE_RSP),
        konn::core::tunnel::make_close_response(998),
        bare(DIAL_REQ),
        bare(CLOSE_REQ),
        bare(DIAL_CLS),
        unknown_type,
    };
    // The fake agent sends and then lingers briefly, so the server's answers can arrive.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 3s);
    ctx.AddMetadata("agentid", "fake-agent");
    auto stream = stub->Connect(&ctx);
    for (const auto& p : packets) REQUIRE(stream->Write(p));
    std::vector<Packet> answers;
    Packet in;
    while (stream->Read(&in)) answers.push_back(in);  // until the deadline ends it
    stream->Finish();
    std::ostringstream what;
    bool close_req_999 = false, close_req_5 = false;
    for (const auto& p : answers) {
      what << describe(p) << "; ";
      if (p.type() == CLOSE_REQ && p.closerequest().connectid() == 999) close_req_999 = true;
      if (p.type() == CLOSE_REQ && p.closerequest().connectid() == 5) close_req_5 = true;
    }
    WARN("server answers to the fake agent: " << what.str());
    // As upstream: DATA for an unknown connection and a DIAL_RSP nobody waits for are each
    // answered with CLOSE_REQ, so the agent frees the connection.
    CHECK(close_req_999);
    CHECK(close_req_5);
    REQUIRE(s.server.process().wait_for_log("agent disconnected agentID=fake-agent", 5s));
  }
  check_still_serving(s);
}

// reliability: proxy-server | agent with a certificate from another CA, or with none | TLS
// reliability+: handshake refused | agent warn "cannot connect to proxy-server"; server: nothing
// reliability+: about the agent | server serves a page through a fresh channel
TEST_CASE("e2e: an agent without a valid certificate is rejected and the server serves on",
          "[e2e][bad-input]") {
  KONN_REQUIRE_DAEMONS();
  TunnelStack s;
  TempDir other_dir{"konn-rogue"};
  auto other = konn::testsupport::generate_certs(other_dir.path());
  SECTION("a certificate from another CA") {
    AgentSpec rogue;
    rogue.id = "rogue";
    rogue.agent_cert = other.agent_crt;
    rogue.agent_key = other.agent_key;
    auto agent = start_agent(s.dir, s.certs, s.server.agent_port(), rogue);
    bool refused = agent->wait_for_log("cannot connect to proxy-server", 10s, 2);
    INFO("rogue agent log:\n" << agent->log());
    CHECK(refused);
    CHECK(s.server.process().count_in_log("agentID=rogue") == 0);
  }
  SECTION("no client certificate") {
    AgentSpec rogue;
    rogue.id = "rogue";
    rogue.no_client_cert = true;
    auto agent = start_agent(s.dir, s.certs, s.server.agent_port(), rogue);
    bool refused = agent->wait_for_log("cannot connect to proxy-server", 10s, 2);
    INFO("rogue agent log:\n" << agent->log());
    CHECK(refused);
    CHECK(s.server.process().count_in_log("agentID=rogue") == 0);
  }
  check_still_serving(s);
}

// reliability: proxy-server | second agent with the same id, then SIGKILL of either | both streams
// reliability+: serve; the survivor takes every dial | info "agent connected ... (duplicate agent
// reliability+: id: the oldest stream not draining takes new dials)", then "agent disconnected
// reliability+: agentID=agent-1" | 20 of 20 echoes before and after
TEST_CASE("e2e: a second agent with the same id and dials keep working", "[e2e][bad-input]") {
  KONN_REQUIRE_DAEMONS();
  TunnelStack s;
  AgentSpec twin;  // same id "agent-1"
  auto second = start_agent(s.dir, s.certs, s.server.agent_port(), twin);
  REQUIRE(s.server.wait_agent_connected("agent-1", 10s, 2));
  auto dial_many = [&](int n) {
    int ok = 0;
    for (int i = 0; i < n; ++i) {
      auto d = Tunnel::dial(s.channel, s.echo.address(), 5s);
      if (!d.tunnel) continue;
      std::string msg = random_bytes(1000, static_cast<uint64_t>(i));
      if (d.tunnel->write(msg) && read_exactly(*d.tunnel, msg.size(), 5s) == msg) ++ok;
      d.tunnel->close(5s);
    }
    return ok;
  };
  CHECK(dial_many(20) == 20);
  SECTION("the first one dies") {
    s.agent->kill(SIGKILL);
    REQUIRE(s.server.process().wait_for_log("agent disconnected agentID=agent-1", 5s));
  }
  SECTION("the second one dies") {
    second->kill(SIGKILL);
    REQUIRE(s.server.process().wait_for_log("agent disconnected agentID=agent-1", 5s));
  }
  CHECK(dial_many(20) == 20);
}

// reliability: proxy-server | a second stream with a connected agent's id that never answers (an
// reliability+: HA agent's duplicate of a server it holds, before it closes it) | the first stream
// reliability+: takes every dial; the second only once the first is gone | info "agent connected
// reliability+: ... (duplicate agent id: the oldest stream not draining takes new dials)" | 20 of
// reliability+: 20 echoes, no DIAL_REQ on the silent stream while the first lives
TEST_CASE("e2e: a silent second stream with a connected agent's id takes no dials from the first",
          "[e2e][bad-input]") {
  KONN_REQUIRE_DAEMONS();
  TunnelStack s;
  FakeAgent::Options o;
  o.id = "agent-1";  // TunnelStack's agent
  FakeAgent silent(s.server.agent_port(), s.certs, o);
  REQUIRE(silent.wait_connected(10s));
  REQUIRE(s.server.wait_agent_connected("agent-1", 10s, 2));
  CHECK(s.server.process().wait_for_log(
      "(duplicate agent id: the oldest stream not draining takes new dials)", 5s));
  for (int i = 0; i < 20; ++i) {
    auto d = Tunnel::dial(s.channel, s.echo.address(), 5s);
    INFO("dial " << i << ": " << d.error);
    REQUIRE(d.tunnel);
    std::string msg = random_bytes(1000, static_cast<uint64_t>(i));
    CHECK(d.tunnel->write(msg));
    CHECK(read_exactly(*d.tunnel, msg.size(), 5s) == msg);
    d.tunnel->close(5s);
  }
  auto dial_req = [](const Packet& p) { return p.type() == DIAL_REQ; };
  CHECK_FALSE(silent.received(dial_req, 0ms));

  // The first agent goes: the second stream takes the next dial.
  s.agent->kill(SIGKILL);
  REQUIRE(s.server.process().wait_for_log("agent disconnected agentID=agent-1", 5s));
  std::string dial_error = "not dialled";
  std::thread dialing([&] {
    auto d = Tunnel::dial(s.channel, "10.9.9.9:80", 10s);
    dial_error = d.tunnel ? "" : d.error;
    if (d.tunnel) d.tunnel->close(5s);
  });
  auto req = silent.next(DIAL_REQ, 10s);
  REQUIRE(req);
  CHECK(req->dialrequest().address() == "10.9.9.9:80");
  CHECK(silent.send(konn::core::tunnel::make_dial_response(req->dialrequest().random(), 5)));
  // The client closes its tunnel: the close reaches the second stream too.
  auto close = silent.next(CLOSE_REQ, 10s);
  CHECK(close);
  if (close) CHECK(silent.send(konn::core::tunnel::make_close_response(5)));
  dialing.join();
  CHECK(dial_error == "");
}

// reliability: proxy-server | unknown flag, bad number, bad duration, unknown --mode, port 70000 |
// reliability+: exit non-zero (not a signal), message names the flag | on stderr | nothing: it does
// reliability+: not start
// reliability: proxy-agent | unknown flag, bad --sync-interval, bad or zero --proxy-server-port |
// reliability+: exit non-zero (not a signal), message names the flag | on stderr | nothing: it does
// reliability+: not start
TEST_CASE("e2e: unknown flags and invalid values make both daemons exit non-zero",
          "[e2e][bad-input]") {
  KONN_REQUIRE_DAEMONS();
  struct Case {
    const char* binary;
    std::vector<std::string> args;
    const char* must_mention;
  };
  std::vector<Case> cases = {
      {"proxy-server", {"--no-such-flag=1"}, "no-such-flag"},
      {"proxy-server", {"--agent-port=abc"}, "--agent-port"},
      {"proxy-server", {"--keepalive-time=forever"}, "--keepalive-time"},
      {"proxy-server", {"--mode=carrier-pigeon"}, "mode"},
      {"proxy-server", {"--agent-port=70000"}, "agent-port"},
      {"proxy-agent", {"--bogus"}, "bogus"},
      {"proxy-agent", {"--sync-interval=fast"}, "--sync-interval"},
      {"proxy-agent", {"--proxy-server-port=x"}, "--proxy-server-port"},
      {"proxy-agent", {"--proxy-server-port=0"}, "proxy-server-port"},
  };
  for (const auto& c : cases) {
    ProcessOptions o;
    o.binary = c.binary;
    o.args = c.args;
    auto r = run_process(std::move(o), 10s);
    INFO(c.binary << " " << c.args[0] << " -> exit " << r.exit_code << ": " << r.output);
    CHECK_FALSE(r.timed_out);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code < 128);  // an error exit, not a crash
    CHECK(r.output.find(c.must_mention) != std::string::npos);
  }
}
