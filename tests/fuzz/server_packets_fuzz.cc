// Packet handling of the proxy-server: random sequences of packets from frontends (Proxy streams)
// and from an agent (a Connect stream) against one real in-process ServerApp (gRPC frontend on a
// unix socket, agents over mTLS), so the tunnel tables (pending dials, connections per agent
// stream) see ids that collide, answers to dials that were never asked or already given up,
// DATA and closes for unknown or foreign connections, extension packets out of place, and
// streams that vanish mid-dial. Node-to-control-plane packets (op bytes 0xF0 and above) dial an
// echo origin, a refused port and addresses outside the allowlist, on streams that did or did
// not negotiate the extension. After each input every stream is cancelled, and the server's
// tables and gauges must come back to empty: anything left is a leak and aborts the run.
//
// Input: a sequence of operations, each an op byte followed by its arguments (FuzzInput).

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "core/log/logger.h"
#include "core/tunnel/packet.h"
#include "konnectivity/agent.grpc.pb.h"
#include "konnectivity/client.grpc.pb.h"
#include "proxy-server/backend/backend_registry.h"
#include "proxy-server/node/node_service.h"
#include "proxy-server/server_app.h"
#include "proxy-server/tunnel/router.h"
#include "test-client/grpc_credentials.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/support/echo_server.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace {

using namespace std::chrono_literals;
namespace tunnel = konn::core::tunnel;
using konn::fuzz::FuzzInput;

// One server for the whole run: starting one per input would measure gRPC start-up, not packets.
struct Fixture {
  konn::testsupport::TempDir dir{"konn-server-fuzz"};
  konn::testsupport::EchoServer echo;  // a node-to-control-plane destination
  konn::server::ServerOptions options;
  std::unique_ptr<konn::server::ServerApp> app;
  std::shared_ptr<grpc::Channel> frontend_channel;
  std::shared_ptr<grpc::Channel> agent_channel;

  Fixture() {
    const char* level = std::getenv("KONN_FUZZ_LOG_LEVEL");  // e.g. debug, to see a finding
    konn::core::log::set_level(level != nullptr ? level : "off");
    const auto& certs = konn::testsupport::test_certs();
    options.mode = "grpc";
    options.uds_name = dir.file("frontend.sock");
    options.agent_port = 0;
    options.agent_bind_address = "127.0.0.1";
    options.cluster_cert = certs.server_crt;
    options.cluster_key = certs.server_key;
    options.cluster_ca_cert = certs.ca_crt;
    options.server_id = "fuzz-server";
    options.health_port = 0;
    options.admin_port = 0;
    options.health_bind_address = "127.0.0.1";
    options.proxy_strategies = {"destHost", "default"};
    // Node to control plane: one destination that answers, one that refuses.
    options.node_to_control_plane_destinations = {echo.address(), "127.0.0.1:1"};
    options.node_to_control_plane_dial_timeout = std::chrono::seconds(2);
    app = std::make_unique<konn::server::ServerApp>(options);
    app->start();
    frontend_channel =
        grpc::CreateChannel("unix:" + options.uds_name, grpc::InsecureChannelCredentials());
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    agent_channel = grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(app->agent_port()),
        konn::testclient::grpc_channel_credentials(certs.ca_crt, certs.agent_crt, certs.agent_key),
        args);
  }
};

Fixture& fixture() { return konn::fuzz::process_fixture<Fixture>(); }

// The agent's stream: what the server sent is drained by a reader, which remembers the dial ids
// of the DIAL_REQs so the input can answer real pending dials as well as made-up ones.
struct AgentStream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<Packet, Packet>> stream;
  std::thread reader;
  std::mutex mu;
  std::vector<int64_t> dial_ids;
  std::vector<int64_t> node_ids;  // connectIDs of the server's successful KONN_NODE_DIAL_RSPs
  std::atomic<bool> ended{false};

  AgentStream(bool flow_control, bool half_close, bool node) {
    ctx.AddMetadata("agentid", "fuzz-agent");
    ctx.AddMetadata("agentidentifiers", "host=node1&ipv4=10.0.0.1&cidr=10.1.0.0/16");
    if (flow_control) ctx.AddMetadata(tunnel::kFlowControlHeader, tunnel::kFlowControlVersion);
    if (half_close) ctx.AddMetadata(tunnel::kHalfCloseHeader, tunnel::kHalfCloseVersion);
    if (node) {
      ctx.AddMetadata(tunnel::kNodeToControlPlaneHeader, tunnel::kNodeToControlPlaneVersion);
    }
    auto stub = AgentService::NewStub(fixture().agent_channel);
    stream = stub->Connect(&ctx);
    stream->WaitForInitialMetadata();
    reader = std::thread([this] {
      Packet p;
      while (stream->Read(&p)) {
        if (p.type() == DIAL_REQ) {
          std::lock_guard lock(mu);
          if (dial_ids.size() < 16) dial_ids.push_back(p.dialrequest().random());
        }
        if (p.type() == KONN_NODE_DIAL_RSP && p.dialresponse().error().empty()) {
          std::lock_guard lock(mu);
          if (node_ids.size() < 16) node_ids.push_back(p.dialresponse().connectid());
        }
      }
      ended = true;
    });
  }
  ~AgentStream() {
    ctx.TryCancel();
    reader.join();
    (void)stream->Finish();
  }
  // A dial id the server sent (waiting briefly for one), or `fallback`.
  int64_t dial_id(unsigned index, int64_t fallback) {
    for (int i = 0; i < 20; ++i) {
      {
        std::lock_guard lock(mu);
        if (!dial_ids.empty()) return dial_ids[index % dial_ids.size()];
      }
      if (ended) break;
      std::this_thread::sleep_for(1ms);
    }
    return fallback;
  }
  // A node connectID the server gave, or `fallback`.
  int64_t node_id(unsigned index, int64_t fallback) {
    std::lock_guard lock(mu);
    return node_ids.empty() ? fallback : node_ids[index % node_ids.size()];
  }
  void send(const Packet& p) { (void)stream->Write(p); }
};

// One frontend (kube-apiserver) tunnel stream. The server's answers are not read: a stream that
// stops reading is a case the server must survive too.
struct FrontendStream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<Packet, Packet>> stream;
  bool writes_done = false;

  FrontendStream() {
    auto stub = ProxyService::NewStub(fixture().frontend_channel);
    stream = stub->Proxy(&ctx);
  }
  ~FrontendStream() {
    ctx.TryCancel();
    (void)stream->Finish();
  }
  void send(const Packet& p) {
    if (!writes_done) (void)stream->Write(p);
  }
};

// Small ids collide on purpose: with the agent's connect ids, with dial ids of other streams.
int64_t small_id(FuzzInput& in) {
  uint8_t b = in.byte();
  if (b >= 250) return -static_cast<int64_t>(b);  // negative ids are never valid
  return b % 8;
}

std::string address(FuzzInput& in) {
  static const std::array<const char*, 6> kAddresses{
      "node1:10250", "10.0.0.1:443", "10.1.2.3:8443", "unknown.example:80", "", "[fd00::1]:443"};
  unsigned i = in.pick(kAddresses.size() + 1);
  if (i < kAddresses.size()) return kAddresses[i];
  return in.bytes(64);
}

// Node to control plane, as an agent would send it (op bytes 0xF0 and above).
void node_op(FuzzInput& in, AgentStream& agent) {
  const auto& f = fixture();
  uint8_t kind = in.byte() % 7;
  int64_t id = agent.node_id(in.byte(), small_id(in));
  switch (kind) {
    case 0: {
      static const std::array<std::string, 4> kTo{"", f.echo.address(), "127.0.0.1:1",
                                                  "kubernetes.default:443"};
      unsigned i = in.pick(kTo.size() + 1);
      std::string to = i < kTo.size() ? kTo[i] : in.bytes(64);
      uint8_t flags = in.byte();
      Packet p = tunnel::as_node(
          tunnel::make_dial_request(to, small_id(in) + 1, (flags & 1) == 0 ? "tcp" : "udp"));
      p.mutable_dialrequest()->set_konnhalfclose((flags & 2) != 0);
      agent.send(p);
      break;
    }
    case 1:
      agent.send(tunnel::as_node(tunnel::make_data(id, in.bytes())));
      break;
    case 2:
      agent.send(tunnel::as_node(tunnel::make_close_response(id, in.flag() ? "EOF" : "")));
      break;
    case 3:
      agent.send(tunnel::as_node(tunnel::make_close_dial(small_id(in) + 1)));
      break;
    case 4:
      agent.send(tunnel::as_node(tunnel::make_window_update(id, small_id(in) * 65536)));
      break;
    case 5:
      agent.send(tunnel::as_node(tunnel::make_close_write(id)));
      break;
    default:  // what only a server sends
      agent.send(tunnel::as_node(tunnel::make_dial_response(small_id(in), id)));
      break;
  }
}

bool tables_empty(konn::server::Router& r) {
  const auto* node = r.node();
  return r.pending().size() == 0 && r.backends().agent_count() == 0 &&
         r.metrics().established.Value() == 0 && r.metrics().grpc_proxy.Value() == 0 &&
         (node == nullptr || (node->stats().endpoint_slots.load() == 0 &&
                              node->stats().open_endpoint_connections.load() == 0));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  auto& f = fixture();
  FuzzInput in(data, size);
  {
    uint8_t mode = in.byte();
    AgentStream agent((mode & 1) != 0, (mode & 2) != 0, (mode & 4) != 0);
    std::vector<std::unique_ptr<FrontendStream>> frontends;
    frontends.push_back(std::make_unique<FrontendStream>());
    int ops = 0;
    while (!in.empty() && ++ops <= 64) {
      uint8_t op = in.byte();
      if (op >= 0xF0) {
        node_op(in, agent);
        continue;
      }
      FrontendStream& fe = *frontends[in.pick(static_cast<unsigned>(frontends.size()))];
      switch (op % 12) {
        case 0:
          if (frontends.size() < 3) frontends.push_back(std::make_unique<FrontendStream>());
          break;
        case 1: {
          int64_t random = small_id(in) + 1;
          std::string addr = address(in);
          uint8_t flags = in.byte();
          Packet p = tunnel::make_dial_request(addr, random, (flags & 1) != 0 ? "tcp" : "udp");
          p.mutable_dialrequest()->set_konnhalfclose((flags & 2) != 0);
          fe.send(p);
          break;
        }
        case 2: {
          int64_t id = small_id(in);
          fe.send(tunnel::make_data(id, in.bytes()));
          break;
        }
        case 3:
          fe.send(tunnel::make_close_request(small_id(in)));
          break;
        case 4:
          fe.send(tunnel::make_close_dial(small_id(in)));
          break;
        case 5:
          if (in.flag()) {
            fe.ctx.TryCancel();
          } else if (!fe.writes_done) {
            (void)fe.stream->WritesDone();
            fe.writes_done = true;
          }
          break;
        case 6: {
          unsigned which = in.byte();
          int64_t random = agent.dial_id(which, small_id(in));
          int64_t id = small_id(in);
          std::string error = in.flag() ? "dial tcp: connection refused" : "";
          Packet p = tunnel::make_dial_response(random, id, error);
          p.mutable_dialresponse()->set_konnhalfclose(in.flag());
          agent.send(p);
          break;
        }
        case 7: {
          int64_t id = small_id(in);
          agent.send(tunnel::make_data(id, in.bytes()));
          break;
        }
        case 8:
          agent.send(tunnel::make_close_response(small_id(in), in.flag() ? "EOF" : ""));
          break;
        case 9:
          agent.send(tunnel::make_close_dial(agent.dial_id(in.byte(), small_id(in))));
          break;
        case 10: {
          uint8_t kind = in.byte() % 3;
          int64_t id = small_id(in);
          if (kind == 0) agent.send(tunnel::make_drain());
          if (kind == 1) agent.send(tunnel::make_window_update(id, small_id(in) * 65536));
          if (kind == 2) agent.send(tunnel::make_close_write(id));
          break;
        }
        case 11: {
          // Any packet at all, as protobuf decodes the bytes: unknown types, missing payloads.
          bool from_agent = in.flag();
          Packet p;
          if (p.ParseFromString(in.bytes())) {
            if (from_agent) {
              agent.send(p);
            } else {
              fe.send(p);
            }
          }
          break;
        }
      }
    }
    if (std::getenv("KONN_FUZZ_VERBOSE") != nullptr) {
      std::this_thread::sleep_for(100ms);  // let the server handle what was sent
      std::lock_guard lock(agent.mu);
      std::fprintf(stderr, "server: %zu frontends, %zu dials reached the agent, established=%g\n",
                   frontends.size(), agent.dial_ids.size(),
                   f.app->router().metrics().established.Value());
    }
    // Streams are cancelled here (destructors), frontends first, then the agent.
    frontends.clear();
  }
  // Everything the input made must be gone once its streams are: pending dials, the agent's
  // registration, established tunnels, open Proxy streams.
  auto& router = f.app->router();
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!tables_empty(router)) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr,
                   "server kept state after every stream ended: pending=%zu agents=%zu "
                   "established=%g proxy_streams=%g node_slots=%lld\n",
                   router.pending().size(), router.backends().agent_count(),
                   router.metrics().established.Value(), router.metrics().grpc_proxy.Value(),
                   static_cast<long long>(router.node()->stats().endpoint_slots.load()));
      std::abort();
    }
    std::this_thread::sleep_for(1ms);
  }
  return 0;
}
