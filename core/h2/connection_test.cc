#include "core/h2/connection.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "core/h2/h2_test_peer.h"
#include "konnectivity/agent.grpc.pb.h"
#include "konnectivity/client.grpc.pb.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

using namespace std::chrono_literals;
using konn::core::h2::CallInfo;
using konn::core::h2::Connection;
using konn::core::h2::ConnectionOptions;
using konn::core::h2::find_metadata;
using konn::core::h2::GrpcStatus;
using konn::core::h2::Metadata;
using konn::core::h2::Stream;
using konn::core::h2::StreamCallbacks;
using namespace konn::core::h2::testing;

namespace {

constexpr size_t kBig = 16 * 1024 * 1024;

std::string serialized(const Packet& p) {
  std::string s;
  p.SerializeToString(&s);
  return s;
}

// What our server saw, shared with the test thread.
struct Seen {
  std::mutex mu;
  std::vector<CallInfo> calls;
  std::vector<GrpcStatus> ends;
  std::atomic<int> messages{0};
  void add_call(const CallInfo& c) {
    std::lock_guard lock(mu);
    calls.push_back(c);
  }
  void add_end(const GrpcStatus& s) {
    std::lock_guard lock(mu);
    ends.push_back(s);
  }
  size_t end_count() {
    std::lock_guard lock(mu);
    return ends.size();
  }
  bool wait_ends(size_t n, std::chrono::milliseconds timeout = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (end_count() >= n) return true;
      std::this_thread::sleep_for(2ms);
    }
    return false;
  }
};

// Our server's AgentService/Connect: response headers with serverid, every message echoed,
// the client's half-close finished with OK and a trailer. agentid "deny" is refused at once
// (trailers-only); "hang" never answers; "reset" is reset after the first message.
Connection::CallHandler echo_service(Seen& seen) {
  return [&seen](const std::shared_ptr<Stream>& s, const CallInfo& info) {
    seen.add_call(info);
    const auto agent = find_metadata(info.metadata, "agentid").value_or("");
    StreamCallbacks cb;
    std::weak_ptr<Stream> w = s;
    cb.on_end = [&seen](const GrpcStatus& st, const Metadata&) { seen.add_end(st); };
    if (agent == "deny") {
      s->set_callbacks(std::move(cb));
      s->finish({7, "agent \"deny\" is not allowed: 100% sure"}, {{"konn-reason", "denied"}});
      return;
    }
    if (agent == "hang") {
      cb.on_message = [&seen](std::string&&) { ++seen.messages; };
      s->set_callbacks(std::move(cb));
      return;
    }
    s->send_headers({{"serverid", "h2-server"}, {"servercount", "1"}});
    cb.on_message = [w, &seen, agent](std::string&& m) {
      ++seen.messages;
      auto live = w.lock();
      if (!live) return;
      if (agent == "reset") {
        live->cancel();
        return;
      }
      live->send_message(m);
    };
    cb.on_half_close = [w] {
      if (auto live = w.lock()) live->finish({0, ""}, {{"konn-trailer", "bye"}});
    };
    s->set_callbacks(std::move(cb));
  };
}

std::shared_ptr<grpc::Channel> channel_to(const H2Server& server, bool tls = false) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(kBig));
  args.SetMaxSendMessageSize(static_cast<int>(kBig));
  // A fresh connection per channel, as a new client would have.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!tls)
    return grpc::CreateCustomChannel(server.target(), grpc::InsecureChannelCredentials(), args);
  grpc::SslCredentialsOptions o;
  const auto& certs = konn::testsupport::test_certs();
  std::ifstream ca(certs.ca_crt);
  o.pem_root_certs.assign(std::istreambuf_iterator<char>(ca), {});
  args.SetSslTargetNameOverride("localhost");
  return grpc::CreateCustomChannel(server.target(), grpc::SslCredentials(o), args);
}

// Runs one Connect stream through a gRPC C++ client: `n` DATA packets echoed, then status.
void grpc_client_round_trips(const std::shared_ptr<grpc::Channel>& channel, int n,
                             size_t size = 64) {
  auto stub = AgentService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.AddMetadata("agentid", "agent-1");
  ctx.AddMetadata("agentidentifiers", "host=node-1");
  auto stream = stub->Connect(&ctx);
  for (int i = 0; i < n; ++i) {
    const std::string bytes(size, static_cast<char>('a' + i % 26));
    REQUIRE(stream->Write(data_packet(i + 1, bytes)));
    Packet back;
    REQUIRE(stream->Read(&back));
    CHECK(back.type() == DATA);
    CHECK(back.data().connectid() == i + 1);
    CHECK(back.data().data() == bytes);
  }
  REQUIRE(stream->WritesDone());
  Packet extra;
  CHECK_FALSE(stream->Read(&extra));
  const auto status = stream->Finish();
  CHECK(status.ok());
  CHECK(status.error_message().empty());
  const auto& initial = ctx.GetServerInitialMetadata();
  REQUIRE(initial.find("serverid") != initial.end());
  CHECK(std::string(initial.find("serverid")->second.data(),
                    initial.find("serverid")->second.size()) == "h2-server");
  const auto& trailing = ctx.GetServerTrailingMetadata();
  REQUIRE(trailing.find("konn-trailer") != trailing.end());
  CHECK(std::string(trailing.find("konn-trailer")->second.data(),
                    trailing.find("konn-trailer")->second.size()) == "bye");
}

// The reference server: gRPC C++ serving both Konnectivity services. agentid picks the mode:
// "echo" (default) echoes until the client half-closes; "deny" answers PERMISSION_DENIED at
// once; "hang" waits for cancellation; "cancel" cancels after one message.
struct ReferenceServer {
  struct AgentImpl final : AgentService::Service {
    ReferenceServer* owner;
    explicit AgentImpl(ReferenceServer* o) : owner(o) {}
    grpc::Status Connect(grpc::ServerContext* ctx,
                         grpc::ServerReaderWriter<Packet, Packet>* stream) override {
      return owner->serve(ctx, stream);
    }
  };
  struct ProxyImpl final : ProxyService::Service {
    ReferenceServer* owner;
    explicit ProxyImpl(ReferenceServer* o) : owner(o) {}
    grpc::Status Proxy(grpc::ServerContext* ctx,
                       grpc::ServerReaderWriter<Packet, Packet>* stream) override {
      return owner->serve(ctx, stream);
    }
  };

  grpc::Status serve(grpc::ServerContext* ctx, grpc::ServerReaderWriter<Packet, Packet>* stream) {
    std::string agent_id;
    auto it = ctx->client_metadata().find("agentid");
    if (it != ctx->client_metadata().end()) agent_id.assign(it->second.data(), it->second.size());
    {
      std::lock_guard lock(mu);
      agent_ids.push_back(agent_id);
    }
    if (agent_id == "deny") return {grpc::StatusCode::PERMISSION_DENIED, "no: 100% denied"};
    ctx->AddInitialMetadata("serverid", "grpc-cpp");
    ctx->AddTrailingMetadata("konn-trailer", "ref");
    if (agent_id == "hang") {
      while (!ctx->IsCancelled()) std::this_thread::sleep_for(2ms);
      ++cancelled;
      return grpc::Status::CANCELLED;
    }
    Packet p;
    while (stream->Read(&p)) {
      if (agent_id == "cancel") {
        ctx->TryCancel();
        return grpc::Status::CANCELLED;
      }
      if (!stream->Write(p)) break;
    }
    if (ctx->IsCancelled()) ++cancelled;
    return grpc::Status::OK;
  }

  explicit ReferenceServer(const std::string& address, bool tls = false, int max_streams = 0)
      : agent_impl(this), proxy_impl(this) {
    grpc::ServerBuilder b;
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
    if (tls) {
      const auto& certs = konn::testsupport::test_certs();
      auto read = [](const std::string& path) {
        std::ifstream f(path);
        return std::string(std::istreambuf_iterator<char>(f), {});
      };
      grpc::SslServerCredentialsOptions o;
      o.pem_key_cert_pairs.push_back({read(certs.server_key), read(certs.server_crt)});
      creds = grpc::SslServerCredentials(o);
    }
    b.AddListeningPort(address, creds, &port);
    b.RegisterService(&agent_impl);
    b.RegisterService(&proxy_impl);
    b.SetMaxReceiveMessageSize(static_cast<int>(kBig));
    b.SetMaxSendMessageSize(static_cast<int>(kBig));
    if (max_streams > 0) b.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, max_streams);
    server = b.BuildAndStart();
  }
  ~ReferenceServer() {
    server->Shutdown(std::chrono::system_clock::now() + 1s);
    // The handlers' last writes happen before this (under mu): an edge TSan sees, where gRPC's
    // own synchronisation is in uninstrumented libraries.
    std::lock_guard lock(mu);
    agent_ids.clear();
    agent_ids.shrink_to_fit();
  }

  AgentImpl agent_impl;
  ProxyImpl proxy_impl;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
  std::mutex mu;
  std::vector<std::string> agent_ids;
  std::atomic<int> cancelled{0};
};

}  // namespace

// --- (a) our server, gRPC C++ client ----------------------------------------------------------

TEST_CASE("h2 server: a gRPC C++ client exchanges Packets on AgentService/Connect",
          "[h2][interop]") {
  Seen seen;
  H2Server server(Kind::Tcp, echo_service(seen));
  grpc_client_round_trips(channel_to(server), 20);
  REQUIRE(seen.wait_ends(1));
  std::lock_guard lock(seen.mu);
  REQUIRE(seen.calls.size() == 1);
  CHECK(seen.calls[0].path == "/AgentService/Connect");
  CHECK(find_metadata(seen.calls[0].metadata, "agentid") == "agent-1");
  CHECK(find_metadata(seen.calls[0].metadata, "agentidentifiers") == "host=node-1");
  CHECK(seen.ends[0].ok());
}

TEST_CASE("h2 server: a trailers-only refusal reaches the gRPC C++ client with its message",
          "[h2][interop]") {
  Seen seen;
  H2Server server(Kind::Tcp, echo_service(seen));
  auto stub = AgentService::NewStub(channel_to(server));
  grpc::ClientContext ctx;
  ctx.AddMetadata("agentid", "deny");
  auto stream = stub->Connect(&ctx);
  Packet p;
  CHECK_FALSE(stream->Read(&p));
  const auto status = stream->Finish();
  CHECK(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(status.error_message() == "agent \"deny\" is not allowed: 100% sure");
  const auto& trailing = ctx.GetServerTrailingMetadata();
  REQUIRE(trailing.find("konn-reason") != trailing.end());
  REQUIRE(seen.wait_ends(1));
  std::lock_guard lock(seen.mu);
  CHECK(seen.ends[0].code == 7);
}

TEST_CASE("h2 server: an unknown method is UNIMPLEMENTED for the gRPC C++ client",
          "[h2][interop]") {
  Seen seen;
  H2Server server(Kind::Tcp, [](const std::shared_ptr<Stream>& s, const CallInfo& info) {
    if (info.path != "/AgentService/Connect") return;  // no callbacks: unknown method
    s->finish({0, ""});
  });
  auto stub = ProxyService::NewStub(channel_to(server));
  grpc::ClientContext ctx;
  auto stream = stub->Proxy(&ctx);
  const auto status = stream->Finish();
  CHECK(status.error_code() == grpc::StatusCode::UNIMPLEMENTED);
  CHECK(status.error_message() == "unknown method /ProxyService/Proxy");
}

// --- (b) our client, gRPC C++ server ----------------------------------------------------------

TEST_CASE("h2 client: AgentService/Connect and ProxyService/Proxy against a gRPC C++ server",
          "[h2][interop]") {
  ReferenceServer ref("127.0.0.1:0");
  Loop loop;
  auto conn = connect_client(loop, Kind::Tcp, "127.0.0.1:" + std::to_string(ref.port));
  for (const std::string path : {"/AgentService/Connect", "/ProxyService/Proxy"}) {
    ClientCall call(loop, conn, path, {{"agentid", "echo"}, {"konn-flow-control", "1"}});
    REQUIRE(call.started());
    for (int i = 0; i < 10; ++i)
      call.send(serialized(data_packet(i + 1, std::string(i * 10, 'x'))));
    REQUIRE(call.wait_messages(10));
    call.half_close();
    auto result = call.wait_end();
    REQUIRE(result);
    CHECK(result->status.ok());
    REQUIRE(result->messages.size() == 10);
    for (int i = 0; i < 10; ++i) {
      Packet p;
      REQUIRE(p.ParseFromString(result->messages[i]));
      CHECK(p.data().connectid() == i + 1);
      CHECK(p.data().data() == std::string(i * 10, 'x'));
    }
    CHECK(find_metadata(result->headers, "serverid") == "grpc-cpp");
    CHECK(find_metadata(result->trailers, "konn-trailer") == "ref");
  }
  std::lock_guard lock(ref.mu);
  CHECK(ref.agent_ids == std::vector<std::string>{"echo", "echo"});
}

TEST_CASE("h2 client: a trailers-only error status from a gRPC C++ server", "[h2][interop]") {
  ReferenceServer ref("127.0.0.1:0");
  Loop loop;
  auto conn = connect_client(loop, Kind::Tcp, "127.0.0.1:" + std::to_string(ref.port));
  ClientCall call(loop, conn, "/AgentService/Connect", {{"agentid", "deny"}});
  auto result = call.wait_end();
  REQUIRE(result);
  CHECK(result->status.code == 7);
  CHECK(result->status.message == "no: 100% denied");
  CHECK(result->messages.empty());
}

// --- (c) TLS with ALPN h2, and h2c over a unix socket ----------------------------------------

TEST_CASE("h2 server: TLS with ALPN h2 to a gRPC C++ client", "[h2][interop][tls]") {
  Seen seen;
  H2Server server(Kind::Tls, echo_service(seen));
  grpc_client_round_trips(channel_to(server, true), 5);
  REQUIRE(seen.wait_ends(1));
}

TEST_CASE("h2 client: TLS with ALPN h2 to a gRPC C++ server", "[h2][interop][tls]") {
  ReferenceServer ref("127.0.0.1:0", true);
  Loop loop;
  auto conn = connect_client(loop, Kind::Tls, "127.0.0.1:" + std::to_string(ref.port));
  ClientCall call(loop, conn, "/AgentService/Connect", {{"agentid", "echo"}});
  call.send(serialized(data_packet(1, "over tls")));
  REQUIRE(call.wait_messages(1));
  call.half_close();
  auto result = call.wait_end();
  REQUIRE(result);
  CHECK(result->status.ok());
}

TEST_CASE("h2 server: a TLS client that does not offer h2 is refused in the handshake",
          "[h2][tls]") {
  Seen seen;
  H2Server server(Kind::Tls, echo_service(seen));
  asio::io_context ctx;
  asio::ssl::context tls(asio::ssl::context::tls_client);
  asio::ssl::stream<asio::ip::tcp::socket> s(ctx, tls);
  s.lowest_layer().connect({asio::ip::make_address("127.0.0.1"), server.port()});
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_set_alpn_protos(s.native_handle(), kHttp11, sizeof(kHttp11));
  std::error_code ec;
  s.handshake(asio::ssl::stream_base::client, ec);
  CHECK(ec);
  // The server keeps serving.
  grpc_client_round_trips(channel_to(server, true), 1);
}

TEST_CASE("h2: plain h2c over a unix socket, both roles against gRPC C++", "[h2][interop]") {
  konn::testsupport::TempDir dir("h2uds");
  {
    Seen seen;
    H2Server server(Kind::Unix, echo_service(seen), {}, dir.file("ours.sock"));
    grpc_client_round_trips(channel_to(server), 5);
  }
  ReferenceServer ref("unix:" + dir.file("ref.sock"));
  Loop loop;
  auto conn = connect_client(loop, Kind::Unix, dir.file("ref.sock"));
  ClientCall call(loop, conn, "/ProxyService/Proxy", {{"agentid", "echo"}});
  call.send(serialized(data_packet(3, "unix")));
  REQUIRE(call.wait_messages(1));
  call.half_close();
  auto result = call.wait_end();
  REQUIRE(result);
  CHECK(result->status.ok());
}

// --- (d) large messages, many streams --------------------------------------------------------

TEST_CASE("h2: messages of several MiB both ways, with gRPC C++ on the other side",
          "[h2][interop][large]") {
  std::string big(5 * 1024 * 1024 + 3, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i % 251);
  // The reference server echoes each message: three of `big`, then the call ends OK.
  auto expect_three_echoes = [&](ClientCall& call) {
    REQUIRE(call.wait_messages(3, 20s));
    call.half_close();
    auto result = call.wait_end();
    REQUIRE(result);
    CHECK(result->status.ok());
    for (const auto& m : result->messages) {
      Packet p;
      REQUIRE(p.ParseFromString(m));
      CHECK(p.data().data() == big);
    }
  };
  SECTION("our server") {
    Seen seen;
    H2Server server(Kind::Tcp, echo_service(seen));
    auto stub = AgentService::NewStub(channel_to(server));
    grpc::ClientContext ctx;
    ctx.AddMetadata("agentid", "big");
    auto stream = stub->Connect(&ctx);
    for (int i = 0; i < 3; ++i) {
      REQUIRE(stream->Write(data_packet(1, big)));
      Packet back;
      REQUIRE(stream->Read(&back));
      CHECK(back.data().data() == big);
    }
    stream->WritesDone();
    CHECK(stream->Finish().ok());
  }
  SECTION("our client") {
    ReferenceServer ref("127.0.0.1:0");
    Loop loop;
    auto conn = connect_client(loop, Kind::Tcp, "127.0.0.1:" + std::to_string(ref.port));
    ClientCall call(loop, conn, "/AgentService/Connect", {{"agentid", "echo"}});
    for (int i = 0; i < 3; ++i) call.send(serialized(data_packet(1, big)));
    expect_three_echoes(call);
  }
  SECTION("our client, the payload borrowed from the sender") {
    // send_framed(head, borrowed): the message is the head's bytes after the prefix room, then
    // the borrowed ones, taken frame by frame from where the sender keeps them.
    ReferenceServer ref("127.0.0.1:0");
    Loop loop;
    auto conn = connect_client(loop, Kind::Tcp, "127.0.0.1:" + std::to_string(ref.port));
    ClientCall call(loop, conn, "/AgentService/Connect", {{"agentid", "echo"}});
    const std::string whole = serialized(data_packet(1, big));
    const size_t split[] = {whole.size() - big.size(), 1, whole.size() - 16385};
    for (size_t at : split) {
      call.send_framed(std::string(5, 'x') + whole.substr(0, at),
                       std::string_view(whole).substr(at));
    }
    expect_three_echoes(call);
  }
}

TEST_CASE("h2 server: a message over the 16 MiB limit is RESOURCE_EXHAUSTED for the client",
          "[h2][interop][large]") {
  Seen seen;
  H2Server server(Kind::Tcp, echo_service(seen));
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 * 1024 * 1024);
  auto stub = AgentService::NewStub(
      grpc::CreateCustomChannel(server.target(), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  auto stream = stub->Connect(&ctx);
  stream->Write(data_packet(1, std::string(kBig + 1, 'z')));
  const auto status = stream->Finish();
  CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(status.error_message().find("larger than the limit of 16777216 bytes") !=
        std::string::npos);
  // The connection still serves.
  grpc_client_round_trips(channel_to(server), 1);
}

TEST_CASE("h2: many concurrent streams on one connection", "[h2][interop][streams]") {
  SECTION("our client, 200 streams to gRPC C++") {
    ReferenceServer ref("127.0.0.1:0");
    Loop loop;
    auto conn = connect_client(loop, Kind::Tcp, "127.0.0.1:" + std::to_string(ref.port));
    std::vector<std::unique_ptr<ClientCall>> calls;
    for (int i = 0; i < 200; ++i) {
      calls.push_back(std::make_unique<ClientCall>(loop, conn, "/ProxyService/Proxy",
                                                   Metadata{{"agentid", "echo"}}));
      calls.back()->send(serialized(data_packet(i, std::to_string(i))));
    }
    for (int i = 0; i < 200; ++i) {
      REQUIRE(calls[i]->wait_messages(1));
      calls[i]->half_close();
    }
    for (int i = 0; i < 200; ++i) {
      auto r = calls[i]->wait_end();
      REQUIRE(r);
      CHECK(r->status.ok());
      Packet p;
      REQUIRE(p.ParseFromString(r->messages.at(0)));
      CHECK(p.data().data() == std::to_string(i));
    }
    CHECK(loop.run([&] { return conn->open_streams(); }) == 0);
  }
  SECTION("our client honours a gRPC C++ server's MAX_CONCURRENT_STREAMS of 3") {
    ReferenceServer ref("127.0.0.1:0", false, 3);
    Loop loop;
    auto conn = connect_client(loop, Kind::Tcp, "127.0.0.1:" + std::to_string(ref.port));
    std::vector<std::unique_ptr<ClientCall>> calls;
    // Let the server's SETTINGS arrive first.
    std::this_thread::sleep_for(50ms);
    for (int i = 0; i < 12; ++i) {
      calls.push_back(std::make_unique<ClientCall>(loop, conn, "/AgentService/Connect",
                                                   Metadata{{"agentid", "echo"}}));
      calls.back()->send(serialized(data_packet(i, "m")));
      calls.back()->half_close();
    }
    for (auto& c : calls) {
      auto r = c->wait_end();
      REQUIRE(r);
      CHECK(r->status.ok());
      CHECK(r->messages.size() == 1);
    }
  }
  SECTION("our server, 32 gRPC C++ streams at once on one channel") {
    Seen seen;
    H2Server server(Kind::Tcp, echo_service(seen));
    auto channel = channel_to(server);
    std::vector<std::thread> threads;
    std::atomic<int> ok{0};
    for (int t = 0; t < 32; ++t) {
      threads.emplace_back([&] {
        auto stub = AgentService::NewStub(channel);
        grpc::ClientContext ctx;
        auto stream = stub->Connect(&ctx);
        for (int i = 0; i < 20; ++i) {
          Packet back;
          if (!stream->Write(data_packet(i, "x")) || !stream->Read(&back)) return;
        }
        stream->WritesDone();
        if (stream->Finish().ok()) ++ok;
      });
    }
    for (auto& t : threads) t.join();
    CHECK(ok == 32);
    CHECK(server.accepted() == 1);
  }
}

// --- (e) cancellation and deadlines -----------------------------------------------------------

TEST_CASE("h2: cancellation mid-stream, both ways, with gRPC C++", "[h2][interop][cancel]") {
  SECTION("a gRPC C++ client cancels: our server's stream ends CANCELLED") {
    Seen seen;
    H2Server server(Kind::Tcp, echo_service(seen));
    auto stub = AgentService::NewStub(channel_to(server));
    grpc::ClientContext ctx;
    ctx.AddMetadata("agentid", "hang");
    auto stream = stub->Connect(&ctx);
    REQUIRE(stream->Write(data_packet(1, "a")));
    ctx.TryCancel();
    CHECK(stream->Finish().error_code() == grpc::StatusCode::CANCELLED);
    REQUIRE(seen.wait_ends(1));
    std::lock_guard lock(seen.mu);
    CHECK(seen.ends[0].code == 1);
  }
  SECTION("our server resets: the gRPC C++ client sees CANCELLED") {
    Seen seen;
    H2Server server(Kind::Tcp, echo_service(seen));
    auto stub = AgentService::NewStub(channel_to(server));
    grpc::ClientContext ctx;
    ctx.AddMetadata("agentid", "reset");
    auto stream = stub->Connect(&ctx);
    REQUIRE(stream->Write(data_packet(1, "a")));
    Packet p;
    CHECK_FALSE(stream->Read(&p));
    CHECK(stream->Finish().error_code() == grpc::StatusCode::CANCELLED);
    REQUIRE(seen.wait_ends(1));
    std::lock_guard lock(seen.mu);
    CHECK(seen.ends[0].code == 1);
  }
  SECTION("our client cancels: the gRPC C++ server sees the call cancelled") {
    ReferenceServer ref("127.0.0.1:0");
    Loop loop;
    auto conn = connect_client(loop, Kind::Tcp, "127.0.0.1:" + std::to_string(ref.port));
    ClientCall call(loop, conn, "/AgentService/Connect", {{"agentid", "hang"}});
    call.send("x");
    std::this_thread::sleep_for(20ms);
    call.cancel();
    auto r = call.wait_end();
    REQUIRE(r);
    CHECK(r->status.code == 1);
    for (int i = 0; i < 500 && ref.cancelled == 0; ++i) std::this_thread::sleep_for(2ms);
    CHECK(ref.cancelled == 1);
  }
  SECTION("the gRPC C++ server cancels: our client's call ends CANCELLED") {
    ReferenceServer ref("127.0.0.1:0");
    Loop loop;
    auto conn = connect_client(loop, Kind::Tcp, "127.0.0.1:" + std::to_string(ref.port));
    ClientCall call(loop, conn, "/AgentService/Connect", {{"agentid", "cancel"}});
    call.send(serialized(data_packet(1, "x")));
    auto r = call.wait_end();
    REQUIRE(r);
    CHECK(r->status.code == 1);
  }
}

TEST_CASE("h2: deadlines with gRPC C++", "[h2][interop][deadline]") {
  SECTION("a gRPC C++ client's deadline reaches our server as grpc-timeout") {
    Seen seen;
    H2Server server(Kind::Tcp, echo_service(seen));
    auto stub = AgentService::NewStub(channel_to(server));
    grpc::ClientContext ctx;
    ctx.AddMetadata("agentid", "hang");
    ctx.set_deadline(std::chrono::system_clock::now() + 300ms);
    auto stream = stub->Connect(&ctx);
    Packet p;
    CHECK_FALSE(stream->Read(&p));
    CHECK(stream->Finish().error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
    REQUIRE(seen.wait_ends(1));
    std::lock_guard lock(seen.mu);
    REQUIRE(seen.calls[0].timeout);
    CHECK(seen.calls[0].timeout->count() > 0);
    CHECK(seen.calls[0].timeout->count() <= 400);  // gRPC rounds it up
    // Either side's timer may fire first: our server's ends the call with DEADLINE_EXCEEDED,
    // the client's with a reset (CANCELLED).
    CHECK((seen.ends[0].code == 4 || seen.ends[0].code == 1));
  }
  SECTION("our client's deadline against a gRPC C++ server that never answers") {
    ReferenceServer ref("127.0.0.1:0");
    Loop loop;
    auto conn = connect_client(loop, Kind::Tcp, "127.0.0.1:" + std::to_string(ref.port));
    ClientCall call(loop, conn, "/AgentService/Connect", {{"agentid", "hang"}}, 200ms);
    auto r = call.wait_end();
    REQUIRE(r);
    CHECK(r->status.code == 4);
    for (int i = 0; i < 500 && ref.cancelled == 0; ++i) std::this_thread::sleep_for(2ms);
    CHECK(ref.cancelled == 1);
  }
}

// --- flow control -----------------------------------------------------------------------------

TEST_CASE("h2 server: a paused stream holds at most its window, then resumes",
          "[h2][interop][flow]") {
  std::mutex mu;
  std::shared_ptr<Stream> held;
  ConnectionOptions opts;
  opts.stream_window = 256 * 1024;
  H2Server server(
      Kind::Tcp,
      [&](const std::shared_ptr<Stream>& s, const CallInfo&) {
        std::weak_ptr<Stream> w = s;
        s->pause_reading();
        {
          std::lock_guard lock(mu);
          held = s;
        }
        StreamCallbacks cb;
        cb.on_message = [w](std::string&& m) {
          if (auto live = w.lock()) live->send_message(m);
        };
        cb.on_half_close = [w] {
          if (auto live = w.lock()) live->finish({0, ""});
        };
        s->set_callbacks(std::move(cb));
      },
      opts);
  auto stub = AgentService::NewStub(channel_to(server));
  grpc::ClientContext ctx;
  auto stream = stub->Connect(&ctx);
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; i < 64; ++i) {
      if (!stream->Write(data_packet(i, std::string(32 * 1024, 'w')))) return;
      ++written;
    }
    stream->WritesDone();
  });
  // The client stops at our window (plus what gRPC buffers on its side).
  std::this_thread::sleep_for(300ms);
  const size_t buffered = server.loop().run([&] { return held->buffered_bytes(); });
  CHECK(buffered <= 256 * 1024);
  CHECK(buffered > 0);
  CHECK(written < 64);
  server.loop().run([&] {
    held->resume_reading();
    return 0;
  });
  int echoed = 0;
  Packet back;
  while (stream->Read(&back)) ++echoed;
  writer.join();
  CHECK(echoed == 64);
  CHECK(stream->Finish().ok());
}

TEST_CASE("h2 server: abort sends its status at once to a gRPC C++ client that stopped reading",
          "[h2][interop][flow]") {
  std::mutex mu;
  std::shared_ptr<Stream> held;
  ConnectionOptions opts;
  H2Server server(
      Kind::Tcp,
      [&](const std::shared_ptr<Stream>& s, const CallInfo&) {
        {
          std::lock_guard lock(mu);
          held = s;
        }
        s->set_callbacks({});
        // Far more than the client's windows take: the rest waits, one message half sent.
        for (int i = 0; i < 64; ++i) s->send_message(serialized(data_packet(i, std::string(100000, 'f'))));
      },
      opts);
  auto stub = AgentService::NewStub(channel_to(server));
  grpc::ClientContext ctx;
  auto stream = stub->Connect(&ctx);
  REQUIRE(stream->Write(data_packet(1, "go")));
  std::this_thread::sleep_for(300ms);  // the client reads nothing meanwhile
  const size_t waiting = server.loop().run([&] { return held->queued_bytes(); });
  CHECK(waiting > 0);
  server.loop().run([&] {
    held->abort({8, "over the tunnel's cap"});
    return 0;
  });
  CHECK(server.loop().run([&] { return held->queued_bytes(); }) == 0);
  Packet p;
  int read = 0;
  while (stream->Read(&p)) ++read;
  CHECK(read < 64);
  const auto status = stream->Finish();
  // A message was half sent: RST_STREAM ENHANCE_YOUR_CALM, which gRPC clients read as
  // RESOURCE_EXHAUSTED (trailers there would read as a broken message to grpc-go).
  CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_CASE("h2 server: a client that stopped reading is left between messages, so abort's status "
          "reaches it", "[h2][interop][flow]") {
  // Message-aligned sending: a message the client's windows cannot take whole waits, so when the
  // client stops reading nothing is half sent, and the status goes in trailers with its message.
  std::mutex mu;
  std::shared_ptr<Stream> held;
  size_t aligned = 0;
  H2Server server(Kind::Tcp, [&](const std::shared_ptr<Stream>& s, const CallInfo&) {
    {
      std::lock_guard lock(mu);
      held = s;
      aligned = s->aligned_message_limit();  // checked on the test thread (Catch is not
                                             // thread-safe)
    }
    s->set_callbacks({});
    for (int i = 0; i < 400; ++i) s->send_message(serialized(data_packet(i, std::string(20000, 'a'))));
  });
  auto stub = AgentService::NewStub(channel_to(server));
  grpc::ClientContext ctx;
  auto stream = stub->Connect(&ctx);
  REQUIRE(stream->Write(data_packet(1, "go")));
  std::this_thread::sleep_for(300ms);  // the client reads nothing meanwhile
  {
    std::lock_guard lock(mu);
    REQUIRE(aligned >= 20100);  // the messages are sent whole
  }
  CHECK(server.loop().run([&] { return held->queued_bytes(); }) > 0);
  server.loop().run([&] {
    held->abort({8, "over the tunnel's cap"});
    return 0;
  });
  Packet p;
  int read = 0;
  while (stream->Read(&p)) ++read;
  CHECK(read > 0);
  CHECK(read < 400);
  const auto status = stream->Finish();
  CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(status.error_message() == "over the tunnel's cap");  // trailers, not a reset
}

TEST_CASE("h2 server: abort between messages sends its status in trailers", "[h2][interop][flow]") {
  std::mutex mu;
  std::shared_ptr<Stream> held;
  H2Server server(Kind::Tcp, [&](const std::shared_ptr<Stream>& s, const CallInfo&) {
    {
      std::lock_guard lock(mu);
      held = s;
    }
    s->set_callbacks({});
    s->send_message(serialized(data_packet(1, "first")));
  });
  auto stub = AgentService::NewStub(channel_to(server));
  grpc::ClientContext ctx;
  auto stream = stub->Connect(&ctx);
  REQUIRE(stream->Write(data_packet(1, "go")));
  Packet p;
  REQUIRE(stream->Read(&p));
  server.loop().run([&] {
    held->abort({8, "over the tunnel's cap"});
    return 0;
  });
  CHECK_FALSE(stream->Read(&p));
  const auto status = stream->Finish();
  CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(status.error_message() == "over the tunnel's cap");
}

TEST_CASE("h2 server: keepalive PINGs answered by a gRPC C++ client keep the connection",
          "[h2][interop][keepalive]") {
  Seen seen;
  ConnectionOptions opts;
  opts.keepalive_interval = 30ms;
  opts.keepalive_timeout = 500ms;
  H2Server server(Kind::Tcp, echo_service(seen), opts);
  auto channel = channel_to(server);
  grpc_client_round_trips(channel, 1);
  std::this_thread::sleep_for(300ms);  // about ten PINGs
  grpc_client_round_trips(channel, 1);
  CHECK(server.accepted() == 1);
  CHECK(server.close_reasons().empty());
}

TEST_CASE("h2 client: post() from another thread, and shutdown against a gRPC C++ server",
          "[h2][interop][goaway]") {
  ReferenceServer ref("127.0.0.1:0");
  Loop loop;
  auto conn = connect_client(loop, Kind::Tcp, "127.0.0.1:" + std::to_string(ref.port));
  std::promise<std::string> closed;
  loop.run([&] {
    conn->set_on_close([&](const std::string& reason) { closed.set_value(reason); });
    return 0;
  });
  ClientCall call(loop, conn, "/AgentService/Connect", {{"agentid", "echo"}});
  // The test thread is not the connection's: it posts.
  std::promise<std::shared_ptr<Stream>> first;
  conn->post([&] {
    auto s = conn->start_call("/ProxyService/Proxy", {{"agentid", "echo"}}, {});
    s->send_message(serialized(data_packet(9, "posted")));
    s->half_close();
    first.set_value(s);
  });
  auto posted = first.get_future().get();
  REQUIRE(posted);
  call.send(serialized(data_packet(1, "x")));
  REQUIRE(call.wait_messages(1));
  loop.run([&] {
    conn->shutdown();
    // No new call once going away.
    return conn->start_call("/AgentService/Connect", {}, {}) == nullptr;
  });
  call.half_close();
  auto r = call.wait_end();
  REQUIRE(r);
  CHECK(r->status.ok());
  auto fut = closed.get_future();
  REQUIRE(fut.wait_for(5s) == std::future_status::ready);
  CHECK(fut.get().empty());
}

TEST_CASE("h2 client: a paused call keeps its messages and its end until resumed",
          "[h2][interop][flow]") {
  ReferenceServer ref("127.0.0.1:0");
  Loop loop;
  auto conn = connect_client(loop, Kind::Tcp, "127.0.0.1:" + std::to_string(ref.port));
  std::atomic<int> messages{0};
  std::atomic<int> end_code{-1};
  auto stream = loop.run([&] {
    StreamCallbacks cb;
    cb.on_message = [&](std::string&&) { ++messages; };
    cb.on_end = [&](const GrpcStatus& st, const Metadata&) { end_code = st.code; };
    auto s = conn->start_call("/AgentService/Connect", {{"agentid", "echo"}}, std::move(cb));
    s->pause_reading();
    for (int i = 0; i < 3; ++i) s->send_message(serialized(data_packet(i, "p")));
    s->half_close();
    return s;
  });
  // The server answers everything and ends the call; nothing is delivered while paused.
  for (int i = 0; i < 500 && loop.run([&] { return conn->open_streams(); }) > 0; ++i) {
    std::this_thread::sleep_for(2ms);
  }
  CHECK(loop.run([&] { return conn->open_streams(); }) == 0);
  CHECK(messages == 0);
  CHECK(end_code == -1);
  CHECK(loop.run([&] { return stream->buffered_bytes(); }) > 0);
  loop.run([&] {
    stream->resume_reading();
    return 0;
  });
  CHECK(messages == 3);
  CHECK(end_code == 0);
}

// Not a pass/fail test (hidden; run it by name): 64-byte round trips on one call, our client to
// our server over a unix socket, each Connection on its own thread, against the same through
// gRPC C++ (client and server, sync API).
TEST_CASE("h2 round-trip latency, ours against gRPC C++", "[.][h2][bench]") {
  konn::testsupport::TempDir dir("h2bench");
  const int n = 5000;
  auto p50 = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return std::make_pair(v[v.size() / 2], v[v.size() * 99 / 100]);
  };
  {
    Seen seen;
    H2Server server(Kind::Unix, echo_service(seen), {}, dir.file("ours.sock"));
    Loop loop;
    auto conn = connect_client(loop, Kind::Unix, dir.file("ours.sock"));
    std::mutex mu;
    std::condition_variable cv;
    int got = 0;
    auto stream = loop.run([&] {
      StreamCallbacks cb;
      cb.on_message = [&](std::string&&) {
        std::lock_guard lock(mu);
        ++got;
        cv.notify_all();
      };
      return conn->start_call("/AgentService/Connect", {}, std::move(cb));
    });
    const std::string msg = serialized(data_packet(1, std::string(64, 'x')));
    std::vector<double> us;
    for (int i = 0; i < n; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      conn->post([&] { stream->send_message(msg); });
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return got > i; });
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    auto [a, b] = p50(us);
    std::printf("core/h2 client -> core/h2 server: p50 %.1f us, p99 %.1f us\n", a, b);
  }
  {
    ReferenceServer ref("unix:" + dir.file("ref.sock"));
    auto stub = AgentService::NewStub(
        grpc::CreateChannel("unix:" + dir.file("ref.sock"), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.AddMetadata("agentid", "echo");
    auto stream = stub->Connect(&ctx);
    const Packet p = data_packet(1, std::string(64, 'x'));
    std::vector<double> us;
    for (int i = 0; i < n; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      stream->Write(p);
      Packet back;
      stream->Read(&back);
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    stream->WritesDone();
    stream->Finish();
    auto [a, b] = p50(us);
    std::printf("gRPC C++ client -> gRPC C++ server: p50 %.1f us, p99 %.1f us\n", a, b);
  }
}
