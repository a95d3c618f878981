// In gRPC mode the frontend's listener (here a unix socket) and the agents' TCP port hand their
// connections to one pool of worker threads. Each service must still answer only on its own
// listener: an agent stream over the socket, or a Proxy call over the agent port, is refused.

#include <dirent.h>
#include <fstream>
#include <set>

#include <catch2/catch.hpp>
#include <grpcpp/create_channel.h>

#include "konnectivity/agent.grpc.pb.h"
#include "test-client/grpc_credentials.h"
#include "test-client/tunnel.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/integration/tunnel/e2e_util.h"
#include "tests/integration/tunnel/tunnel_stack.h"

using namespace std::chrono_literals;
using konn::e2e::ServerSpec;
using konn::e2e::TunnelStack;
using konn::testclient::Tunnel;

namespace {

// The names of a process's threads (/proc/PID/task/*/comm).
std::multiset<std::string> thread_names(int pid) {
  std::multiset<std::string> names;
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (auto* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(dir + "/" + e->d_name + "/comm");
    std::string name;
    std::getline(in, name);
    names.insert(name);
  }
  ::closedir(d);
  return names;
}

// Opens /AgentService/Connect on `channel` as an agent would and returns how the server ended it.
grpc::Status agent_stream_status(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = AgentService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.AddMetadata("agentid", "intruder");
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  auto stream = stub->Connect(&ctx);
  Packet p;
  while (stream->Read(&p)) {
  }
  return stream->Finish();
}

void check_each_service_on_its_own_listener(TunnelStack& s) {
  SECTION("a tunnel through the unix socket works") {
    auto d = Tunnel::dial(s.channel, s.echo.address(), 5s);
    REQUIRE(d.error.empty());
    CHECK(d.tunnel->write("ping"));
    CHECK(konn::e2e::read_exactly(*d.tunnel, 4, 5s) == "ping");
    CHECK(d.tunnel->close(5s) == "");
  }
  SECTION("an agent stream over the unix socket is refused, and no agent is added") {
    auto uds =
        grpc::CreateChannel("unix:" + s.server.uds_path(), grpc::InsecureChannelCredentials());
    auto status = agent_stream_status(uds);
    INFO(status.error_message());
    CHECK(status.error_code() == grpc::StatusCode::UNIMPLEMENTED);
    CHECK(s.server.process().wait_for_log("agents connect to the agent port", 2s));
    CHECK_FALSE(s.server.wait_agent_connected("intruder", 300ms));
  }
  SECTION("a Proxy call over the agent port, with a valid agent certificate, is refused") {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto creds = konn::testclient::grpc_channel_credentials(s.certs.ca_crt, s.certs.agent_crt,
                                                            s.certs.agent_key);
    auto tcp = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(s.server.agent_port()),
                                         creds, args);
    auto d = Tunnel::dial(tcp, s.echo.address(), 5s);
    CHECK_FALSE(d.tunnel);
    INFO(d.error);
    CHECK(d.error.find("code 12") != std::string::npos);  // UNIMPLEMENTED
    // The echo origin was never dialled.
    CHECK(s.echo.active() == 0);
    CHECK(s.echo.digests().empty());
  }
}

}  // namespace

TEST_CASE(
    "grpc mode, unix socket: one pool of workers serves both listeners, each service only on its "
    "own",
    "[e2e][listeners]") {
  KONN_REQUIRE_DAEMONS();
  TunnelStack s;
  CHECK(s.server.process().wait_for_log("frontend (grpc) listening on unix:", 5s));
  auto threads = thread_names(s.server.process().pid());
  CHECK(threads.count("server-worker-0") == 1);
  CHECK(threads.count("grpc-streams") == 0);
  CHECK(threads.count("frontend-calls") == 0);
  check_each_service_on_its_own_listener(s);
}
