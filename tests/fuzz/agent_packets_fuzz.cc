// Packet handling of the proxy-agent: random sequences of packets from a proxy-server against one
// real in-process AgentApp, whose dials reach real loopback endpoints (an echo, one that sends
// and closes, one that never reads, a refused port, a forbidden metadata address, names). The
// agent's connection table sees dial ids reused, DATA, closes, half-closes and credit for unknown
// or closing connections, DIAL_CLS racing the dial, packets only an agent sends, and its stream
// cut mid-tunnel. After each input every connection is closed by the server's side (CLOSE_REQ,
// DIAL_CLS) or by the stream's end, and the agent must come back to no endpoint connection and
// no slot taken: anything left is a leak and aborts the run. Node to control plane (case 9 bytes
// 0xE0 and above): clients connect to the agent's listener and go, and the server answers their
// dials (or not), sends DATA, closes, credit and half-closes for ids that may not exist.
//
// Input: operations, each an op byte followed by its arguments (FuzzInput).

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "core/io/asio_compat.h"
#include "core/log/logger.h"
#include "core/net/listener.h"
#include "core/tunnel/packet.h"
#include "konnectivity/agent.grpc.pb.h"
#include "proxy-agent/agent_app.h"
#include "proxy-agent/server_set.h"
#include "test-client/grpc_credentials.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/support/test_certs.h"

namespace {

using namespace std::chrono_literals;
namespace tunnel = konn::core::tunnel;
namespace io = konn::core::io;
using konn::fuzz::FuzzInput;

// Loopback destinations of the agent's dials, on one thread.
class Endpoints {
 public:
  enum Kind { Echo, SendAndClose, NeverReads, kKinds };

  Endpoints() {
    acceptors_.reserve(kKinds);  // the accept loops hold references into it
    for (int k = 0; k < kKinds; ++k) {
      acceptors_.push_back(konn::core::net::listen_tcp(ctx_, "127.0.0.1", 0));
      asio::co_spawn(ctx_, accept_loop(acceptors_.back(), static_cast<Kind>(k)), asio::detached);
    }
    thread_ = std::thread([this] { ctx_.run(); });
  }
  ~Endpoints() {
    ctx_.stop();
    thread_.join();
  }
  Endpoints(const Endpoints&) = delete;
  Endpoints& operator=(const Endpoints&) = delete;
  std::string address(Kind k) const {
    return "127.0.0.1:" + std::to_string(acceptors_[k].local_endpoint().port());
  }
  uint16_t port(Kind k) const { return acceptors_[k].local_endpoint().port(); }

 private:
  io::Awaitable<void> accept_loop(asio::ip::tcp::acceptor& a, Kind kind) {
    while (true) {
      auto [ec, sock] = co_await a.async_accept(io::use_nothrow);
      if (ec) co_return;
      asio::co_spawn(ctx_, serve(std::move(sock), kind), asio::detached);
    }
  }
  static io::Awaitable<void> serve(asio::ip::tcp::socket sock, Kind kind) {
    std::array<char, 16 * 1024> buf{};
    if (kind == SendAndClose) {
      std::string hello(40000, 'x');
      co_await asio::async_write(sock, asio::buffer(hello), io::use_nothrow);
      co_return;
    }
    if (kind == NeverReads) {
      // Wait for the agent to close: a read that returns only at EOF or error, after a long
      // while; the agent's queue towards us fills meanwhile.
      asio::steady_timer t(sock.get_executor(), 30s);
      co_await t.async_wait(io::use_nothrow);
      co_return;
    }
    while (true) {
      auto [ec, n] = co_await sock.async_read_some(asio::buffer(buf), io::use_nothrow);
      if (ec) co_return;
      auto [wec, wn] =
          co_await asio::async_write(sock, asio::buffer(buf.data(), n), io::use_nothrow);
      if (wec) co_return;
    }
  }

  asio::io_context ctx_{1};
  std::vector<asio::ip::tcp::acceptor> acceptors_;
  std::thread thread_;
};

// The proxy-server side: one scripted Connect stream at a time. The handler drains what the
// agent sends and remembers the connect ids of successful DIAL_RSPs.
class FakeServer final : public AgentService::Service {
 public:
  FakeServer() {
    const auto& c = konn::testsupport::test_certs();
    grpc::ServerBuilder b;
    b.AddListeningPort(
        "127.0.0.1:0",
        konn::testclient::grpc_server_credentials(c.server_crt, c.server_key, c.ca_crt), &port_);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    if (!server_) std::abort();
  }
  ~FakeServer() override {
    server_->Shutdown(std::chrono::system_clock::now() + 2s);
    server_->Wait();
  }
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;
  int port() const { return port_; }

  grpc::Status Connect(grpc::ServerContext* ctx,
                       grpc::ServerReaderWriter<Packet, Packet>* stream) override {
    ctx->AddInitialMetadata("serverid", "fuzz-server");
    ctx->AddInitialMetadata("servercount", "1");
    ctx->AddInitialMetadata(tunnel::kFlowControlHeader, tunnel::kFlowControlVersion);
    ctx->AddInitialMetadata(tunnel::kNodeToControlPlaneHeader,
                            tunnel::kNodeToControlPlaneVersion);
    stream->SendInitialMetadata();
    {
      std::lock_guard lock(mu_);
      ctx_ = ctx;
      stream_ = stream;
      ++generation_;
      connect_ids_.clear();
    }
    cv_.notify_all();
    Packet p;
    while (stream->Read(&p)) {
      if (p.type() == DIAL_RSP) {
        std::lock_guard lock(mu_);
        ++dial_answers_;
        if (p.dialresponse().error().empty()) connect_ids_.insert(p.dialresponse().connectid());
      }
      if (p.type() == KONN_NODE_DIAL_REQ) {
        std::lock_guard lock(mu_);
        node_dials_.insert(p.dialrequest().random());
      }
    }
    std::lock_guard lock(mu_);
    stream_ = nullptr;
    ctx_ = nullptr;
    return grpc::Status::OK;
  }

  // Waits for a live stream (the agent reconnects after a cut).
  bool wait_stream(std::chrono::milliseconds limit) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [this] { return stream_ != nullptr; });
  }
  void send(const Packet& p) {
    std::lock_guard lock(mu_);
    if (stream_ != nullptr) (void)stream_->Write(p);
  }
  void cut() {
    std::lock_guard lock(mu_);
    if (ctx_ != nullptr) ctx_->TryCancel();
  }
  std::set<int64_t> connect_ids() {
    std::lock_guard lock(mu_);
    return connect_ids_;
  }
  // After an input: its connections are closed, their ids are not reused by the next one.
  void forget() {
    std::lock_guard lock(mu_);
    connect_ids_.clear();
    node_dials_.clear();
    node_ids_.clear();
  }
  // Node to control plane: the dial ids the agent asked for, and the connectIDs we answered.
  std::set<int64_t> node_dials() {
    std::lock_guard lock(mu_);
    return node_dials_;
  }
  int64_t node_dial(unsigned index, int64_t fallback) {
    std::lock_guard lock(mu_);
    if (node_dials_.empty()) return fallback;
    auto it = node_dials_.begin();
    std::advance(it, index % node_dials_.size());
    return *it;
  }
  void answered_node(int64_t id) {
    std::lock_guard lock(mu_);
    node_ids_.insert(id);
  }
  std::set<int64_t> node_ids() {
    std::lock_guard lock(mu_);
    return node_ids_;
  }
  // Counts the streams so far: a change means the one an input used has ended (cut by the input,
  // or broken by a packet the agent could not parse, e.g. a string field that is not UTF-8).
  uint64_t generation() {
    std::lock_guard lock(mu_);
    return stream_ == nullptr ? 0 : generation_;
  }
  // DIAL_RSPs received over every stream.
  uint64_t dial_answers() {
    std::lock_guard lock(mu_);
    return dial_answers_;
  }
  // One connect id the agent reported, by index (waiting briefly for a first one, since dials
  // answer asynchronously), or `fallback`.
  int64_t connect_id(unsigned index, int64_t fallback) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 20ms, [this] { return !connect_ids_.empty() || stream_ == nullptr; });
    if (connect_ids_.empty()) return fallback;
    auto it = connect_ids_.begin();
    std::advance(it, index % connect_ids_.size());
    return *it;
  }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  grpc::ServerContext* ctx_ = nullptr;
  grpc::ServerReaderWriter<Packet, Packet>* stream_ = nullptr;
  std::set<int64_t> connect_ids_;
  std::set<int64_t> node_dials_;
  std::set<int64_t> node_ids_;
  uint64_t dial_answers_ = 0;
  uint64_t generation_ = 0;
};

struct Fixture {
  Endpoints endpoints;
  FakeServer server;
  konn::agent::AgentOptions options;
  std::unique_ptr<konn::agent::AgentApp> app;

  Fixture() {
    const char* level = std::getenv("KONN_FUZZ_LOG_LEVEL");  // e.g. debug, to see a finding
    konn::core::log::set_level(level != nullptr ? level : "off");
    const auto& c = konn::testsupport::test_certs();
    options.proxy_server_hosts = {"127.0.0.1"};
    options.proxy_server_port = server.port();
    options.ca_cert = c.ca_crt;
    options.agent_cert = c.agent_crt;
    options.agent_key = c.agent_key;
    options.agent_id = "fuzz-agent";
    options.agent_identifiers = "host=node1&default-route=true";
    options.sync_interval = 20ms;
    options.sync_interval_cap = 100ms;
    options.probe_interval = 100ms;
    options.dial_timeout = 2s;
    options.health_server_host = "127.0.0.1";
    options.health_server_port = 0;
    options.admin_server_port = 0;
    options.node_to_control_plane_listen = {"127.0.0.1:0"};
    app = std::make_unique<konn::agent::AgentApp>(options);
    app->start();
  }
};

Fixture& fixture() { return konn::fuzz::process_fixture<Fixture>(); }

int64_t small_id(FuzzInput& in) {
  uint8_t b = in.byte();
  if (b >= 250) return -static_cast<int64_t>(b);
  return b % 8;
}

std::string destination(FuzzInput& in, const Endpoints& e) {
  switch (in.pick(9)) {
    case 0:
      return e.address(Endpoints::Echo);
    case 1:
      return e.address(Endpoints::SendAndClose);
    case 2:
      return e.address(Endpoints::NeverReads);
    case 3:
      return "127.0.0.1:1";  // refused
    case 4:
      return "169.254.169.254:80";  // not allowed by default
    case 5:
      return "localhost:" + std::to_string(e.port(Endpoints::Echo));
    case 6:
      return "localhost:1";  // a name, then refused (no resolver is reachable from the tests)
    case 7:
      return "[::1]:" + std::to_string(e.port(Endpoints::Echo));
    default:
      return in.bytes(64);
  }
}

// Node-side clients of the agent's --node-to-control-plane-listen address.
struct NodeClients {
  std::vector<std::unique_ptr<asio::ip::tcp::socket>> sockets;
  asio::io_context ctx;

  void open(uint16_t port, const std::string& bytes) {
    if (sockets.size() >= 4) return;
    auto s = std::make_unique<asio::ip::tcp::socket>(ctx);
    std::error_code ec;
    s->connect({asio::ip::make_address("127.0.0.1"), port}, ec);
    if (ec) return;
    s->non_blocking(true, ec);
    (void)s->write_some(asio::buffer(bytes), ec);
    sockets.push_back(std::move(s));
  }
  void close_one(unsigned index) {
    if (sockets.empty()) return;
    sockets.erase(sockets.begin() + static_cast<std::ptrdiff_t>(index % sockets.size()));
  }
};

// Node to control plane, as a server would answer (case 9 bytes 0xE0 and above).
void node_op(uint8_t b, FuzzInput& in, Fixture& f, NodeClients& clients) {
  switch (b % 6) {
    case 0:
      clients.open(f.app->node_listen_ports().front(), in.bytes(64));
      break;
    case 1: {
      int64_t random = f.server.node_dial(in.byte(), small_id(in) + 1);
      int64_t id = small_id(in) + 1;
      bool ok = in.flag();
      f.server.send(tunnel::as_node(
          tunnel::make_dial_response(random, ok ? id : 0, ok ? "" : "dial tcp: refused")));
      if (ok) f.server.answered_node(id);
      break;
    }
    case 2:
      f.server.send(tunnel::as_node(tunnel::make_data(small_id(in) + 1, in.bytes())));
      break;
    case 3:
      f.server.send(tunnel::as_node(tunnel::make_close_response(small_id(in) + 1)));
      break;
    case 4: {
      int64_t id = small_id(in) + 1;
      if (in.flag()) {
        f.server.send(tunnel::as_node(tunnel::make_window_update(id, small_id(in) * 65536)));
      } else {
        f.server.send(tunnel::as_node(tunnel::make_close_write(id)));
      }
      break;
    }
    default:
      clients.close_one(in.byte());
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  auto& f = fixture();
  if (!f.server.wait_stream(10s)) {
    std::fprintf(stderr, "the agent did not connect to the fake server\n");
    std::abort();
  }
  FuzzInput in(data, size);
  std::set<int64_t> dial_ids;
  const auto& stats = f.app->stats();
  uint64_t answers_before = f.server.dial_answers();
  uint64_t cancelled_before = stats.dials_cancelled.load();
  uint64_t dials_sent = 0;
  bool cut = false;
  NodeClients clients;
  uint64_t generation = f.server.generation();
  int ops = 0;
  while (!in.empty() && ++ops <= 64) {
    uint8_t op = in.byte();
    switch (op % 10) {
      case 0:
      case 1: {
        int64_t random = small_id(in) + 1;
        std::string to = destination(in, f.endpoints);
        uint8_t flags = in.byte();
        Packet p = tunnel::make_dial_request(to, random, (flags & 1) == 0 ? "tcp" : "udp");
        p.mutable_dialrequest()->set_konnhalfclose((flags & 2) != 0);
        dial_ids.insert(random);
        f.server.send(p);
        ++dials_sent;
        break;
      }
      case 2: {
        int64_t id = f.server.connect_id(in.byte(), small_id(in));
        f.server.send(tunnel::make_data(id, in.bytes()));
        break;
      }
      case 3:
        f.server.send(tunnel::make_close_request(f.server.connect_id(in.byte(), small_id(in))));
        break;
      case 4:
        f.server.send(tunnel::make_close_dial(small_id(in) + 1));
        break;
      case 5: {
        int64_t id = f.server.connect_id(in.byte(), small_id(in));
        f.server.send(tunnel::make_window_update(id, small_id(in) * 1024 * 1024));
        break;
      }
      case 6:
        f.server.send(tunnel::make_close_write(f.server.connect_id(in.byte(), small_id(in))));
        break;
      case 7: {
        Packet p;
        if (p.ParseFromString(in.bytes())) f.server.send(p);
        break;
      }
      case 8: {
        // Packets only an agent sends, or a server answers with.
        uint8_t kind = in.byte() % 3;
        int64_t id = small_id(in);
        if (kind == 0) f.server.send(tunnel::make_dial_response(id, id));
        if (kind == 1) f.server.send(tunnel::make_close_response(id));
        if (kind == 2) f.server.send(tunnel::make_drain());
        break;
      }
      case 9: {
        uint8_t b = in.byte();
        if (b == 0xC7) {  // rare: the stream breaks mid-tunnel
          f.server.cut();
          cut = true;
        } else if (b >= 0xE0) {
          node_op(b, in, f, clients);
        }
        break;
      }
    }
  }
  // Every dial is answered (a DIAL_RSP, or cancelled by DIAL_CLS) unless the stream was cut:
  // wait for that first, or an empty table would pass before the agent even saw the dials.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!cut && f.server.generation() == generation &&
         f.server.dial_answers() - answers_before +
                 (stats.dials_cancelled.load() - cancelled_before) <
             dials_sent) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "agent left dials unanswered: %llu sent, %llu answered\n",
                   static_cast<unsigned long long>(dials_sent),
                   static_cast<unsigned long long>(f.server.dial_answers() - answers_before));
      std::abort();
    }
    std::this_thread::sleep_for(1ms);
  }
  // The server's side closes whatever is left: dials it asked for (DIAL_CLS) and connections the
  // agent reported (CLOSE_REQ), repeatedly, since dials still answer while this runs.
  deadline = std::chrono::steady_clock::now() + 10s;
  while (f.app->servers().endpoint_connections() != 0 ||
         stats.open_endpoint_connections.load() != 0 || stats.endpoint_slots.load() != 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr,
                   "agent kept state after the server closed everything: table=%zu open=%lld "
                   "slots=%lld\n",
                   f.app->servers().endpoint_connections(),
                   static_cast<long long>(stats.open_endpoint_connections.load()),
                   static_cast<long long>(stats.endpoint_slots.load()));
      std::abort();
    }
    for (int64_t random : dial_ids) f.server.send(tunnel::make_close_dial(random));
    for (int64_t id : f.server.connect_ids()) f.server.send(tunnel::make_close_request(id));
    std::this_thread::sleep_for(5ms);
  }
  // Node side: the clients go, and the server answers every dial still waiting (with an error)
  // and closes the tunnels it opened; the agent must hold no node connection after.
  clients.sockets.clear();
  const auto& node_stats = f.app->node_stats();
  deadline = std::chrono::steady_clock::now() + 10s;
  while (node_stats.endpoint_slots.load() != 0 || node_stats.open_endpoint_connections.load() != 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "agent kept node connections: slots=%lld open=%lld\n",
                   static_cast<long long>(node_stats.endpoint_slots.load()),
                   static_cast<long long>(node_stats.open_endpoint_connections.load()));
      std::abort();
    }
    for (int64_t random : f.server.node_dials()) {
      f.server.send(tunnel::as_node(tunnel::make_dial_response(random, 0, "fuzz: gone")));
    }
    for (int64_t id : f.server.node_ids()) {
      f.server.send(tunnel::as_node(tunnel::make_close_response(id)));
    }
    std::this_thread::sleep_for(5ms);
  }
  f.server.forget();
  if (std::getenv("KONN_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr,
                 "agent: dials=%llu failed=%llu refused=%llu bytes_to=%llu bytes_from=%llu\n",
                 static_cast<unsigned long long>(stats.dials.load()),
                 static_cast<unsigned long long>(stats.dial_failures.load()),
                 static_cast<unsigned long long>(
                     stats.dials_refused[konn::agent::AgentStats::RefusedDestination].load() +
                     stats.dials_refused[konn::agent::AgentStats::RefusedProtocol].load()),
                 static_cast<unsigned long long>(stats.bytes_to_endpoints.load()),
                 static_cast<unsigned long long>(stats.bytes_from_endpoints.load()));
  }
  return 0;
}
