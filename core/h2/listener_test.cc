#include "core/h2/listener.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <asio/connect.hpp>
#include <asio/read.hpp>
#include <asio/ssl.hpp>
#include <catch2/catch.hpp>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "core/h2/h2_test_peer.h"
#include "core/tls/tls_context.h"
#include "konnectivity/agent.grpc.pb.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

using namespace std::chrono_literals;
using konn::core::h2::CallInfo;
using konn::core::h2::Connection;
using konn::core::h2::GrpcStatus;
using konn::core::h2::Listener;
using konn::core::h2::ListenerOptions;
using konn::core::h2::Metadata;
using konn::core::h2::PeerInfo;
using konn::core::h2::Stream;
using konn::core::h2::StreamCallbacks;
using namespace konn::core::h2::testing;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Echoes every message; finishes OK at the client's half-close.
Connection::CallHandler echo_handler() {
  return [](const std::shared_ptr<Stream>& s, const CallInfo&) {
    std::weak_ptr<Stream> w = s;
    StreamCallbacks cb;
    cb.on_message = [w](std::string&& m) {
      if (auto live = w.lock()) live->send_message(m);
    };
    cb.on_half_close = [w] {
      if (auto live = w.lock()) live->finish({0, ""});
    };
    s->set_callbacks(std::move(cb));
  };
}

// A listener on a pool of two workers, its acceptor on its own loop; records the peers.
struct Fixture {
  explicit Fixture(ListenerOptions options = {}) {
    pool.start();
    listener = std::make_unique<Listener>(
        accept_loop.ctx(), pool, std::move(options),
        [this](const std::shared_ptr<Connection>&, const PeerInfo& peer) {
          std::lock_guard lock(mu);
          peers.push_back(peer);
          return refuse ? Connection::CallHandler() : echo_handler();
        },
        [this](const PeerInfo& peer, const std::string&) {
          std::lock_guard lock(mu);
          closed.push_back(peer);
        });
  }
  ~Fixture() {
    listener.reset();
    pool.stop();
  }
  std::vector<PeerInfo> seen() {
    std::lock_guard lock(mu);
    return peers;
  }
  template <typename Pred>
  bool eventually(Pred pred, std::chrono::milliseconds timeout = 3s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred()) return true;
      std::this_thread::sleep_for(2ms);
    }
    return pred();
  }

  konn::core::io::WorkerPool pool{2};
  Loop accept_loop;
  std::mutex mu;
  std::vector<PeerInfo> peers;
  std::vector<PeerInfo> closed;  // as the CloseHandler saw them
  bool refuse = false;  // the owner refuses every peer
  std::unique_ptr<Listener> listener;
};

std::shared_ptr<grpc::Channel> channel(const std::string& target, bool tls) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!tls) return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  const auto& certs = konn::testsupport::test_certs();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = read_file(certs.ca_crt);
  o.pem_cert_chain = read_file(certs.agent_crt);
  o.pem_private_key = read_file(certs.agent_key);
  args.SetSslTargetNameOverride("localhost");
  return grpc::CreateCustomChannel(target, grpc::SslCredentials(o), args);
}

void round_trip(grpc::ClientReaderWriter<Packet, Packet>& stream, int64_t id) {
  REQUIRE(stream.Write(data_packet(id, "hello")));
  Packet back;
  REQUIRE(stream.Read(&back));
  CHECK(back.data().connectid() == id);
}

// One Connect call with one echoed DATA packet, then a clean finish. Returns what went wrong, or
// "" when the call went through; it uses no Catch macro, so any thread may make it.
std::string try_one_call(const std::shared_ptr<grpc::Channel>& ch,
                         std::chrono::seconds deadline) {
  auto stub = AgentService::NewStub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  auto stream = stub->Connect(&ctx);
  if (!stream->Write(data_packet(7, "hello"))) return "write failed";
  Packet back;
  if (!stream->Read(&back)) return "no echo";
  if (back.data().connectid() != 7) return "echo of the wrong connection";
  if (!stream->WritesDone()) return "WritesDone failed";
  const auto st = stream->Finish();
  return st.ok() ? "" : "finished with " + st.error_message();
}

void one_call(const std::shared_ptr<grpc::Channel>& ch) { REQUIRE(try_one_call(ch, 5s) == ""); }

std::shared_ptr<asio::ssl::context> mtls_context() {
  const auto& certs = konn::testsupport::test_certs();
  return konn::core::tls::make_server_context(
      {certs.server_crt, certs.server_key, certs.ca_crt, {}});
}

std::string preface_and_settings() { return std::string(kPreface) + frame(4, 0, 0, ""); }

}  // namespace

TEST_CASE(
    "h2 listener: a gRPC client calls AgentService/Connect over mTLS and the owner sees its "
    "certificate") {
  Fixture f;
  f.listener->set_tls_context(mtls_context());
  f.listener->listen_tcp("127.0.0.1", 0);
  one_call(channel("127.0.0.1:" + std::to_string(f.listener->port()), true));
  auto peers = f.seen();
  REQUIRE(peers.size() == 1);
  CHECK(peers[0].tls);
  CHECK_FALSE(peers[0].unix_socket);
  CHECK(peers[0].address.rfind("127.0.0.1:", 0) == 0);
  REQUIRE(peers[0].certificate);
  CHECK(peers[0].certificate->names.common_name == "proxy-agent");
  CHECK(f.listener->stats().accepted == 1);
  // The connection kept the certificate's names for its life.
  REQUIRE(f.eventually([&] {
    std::lock_guard lock(f.mu);
    return f.closed.size() == 1;
  }));
  std::lock_guard lock(f.mu);
  REQUIRE(f.closed[0].certificate);
  CHECK(f.closed[0].certificate->names.common_name == "proxy-agent");
}

TEST_CASE("h2 listener: h2c on a unix socket") {
  konn::testsupport::TempDir dir;
  const auto path = dir.file("h2.sock");
  Fixture f;
  f.listener->listen_unix(path, true, 0770);
  one_call(channel("unix:" + path, false));
  one_call(channel("unix:" + path, false));
  auto peers = f.seen();
  REQUIRE(peers.size() == 2);
  CHECK(peers[0].address == "unix");
  CHECK(peers[0].unix_socket);
  CHECK_FALSE(peers[0].tls);
  CHECK_FALSE(peers[0].certificate);
  CHECK(peers[0].id != peers[1].id);
  f.listener->stop(1s);
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("h2 listener: a TLS client that does not offer ALPN h2 is refused") {
  Fixture f;
  f.listener->set_tls_context(mtls_context());
  f.listener->listen_tcp("127.0.0.1", 0);
  const auto& certs = konn::testsupport::test_certs();
  for (const bool offer_http11 : {false, true}) {
    asio::io_context io;
    asio::ssl::context ctx(asio::ssl::context::tls_client);
    ctx.use_certificate_chain_file(certs.agent_crt);
    ctx.use_private_key_file(certs.agent_key, asio::ssl::context::pem);
    asio::ssl::stream<asio::ip::tcp::socket> s(io, ctx);
    if (offer_http11) {
      static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
      SSL_set_alpn_protos(s.native_handle(), kHttp11, sizeof(kHttp11));
    }
    s.lowest_layer().connect({asio::ip::make_address("127.0.0.1"), f.listener->port()});
    std::error_code ec;
    s.handshake(asio::ssl::stream_base::client, ec);
    if (!ec) {
      // TLS 1.3: the server's verdict comes after the client's handshake finished.
      s.write_some(asio::buffer(preface_and_settings()), ec);
      char buf[64];
      s.read_some(asio::buffer(buf), ec);
    }
    CHECK(ec);
  }
  CHECK(f.eventually([&] { return f.listener->stats().handshake_failures == 2; }));
  CHECK(f.seen().empty());
  CHECK(f.eventually([&] { return f.listener->stats().open == 0; }));
}

TEST_CASE("h2 listener: a client that never completes its handshake is closed in time") {
  ListenerOptions o;
  o.handshake_timeout = 200ms;
  for (const bool tls : {false, true}) {
    Fixture f(o);
    if (tls) f.listener->set_tls_context(mtls_context());
    f.listener->listen_tcp("127.0.0.1", 0);
    RawPeer silent(f.listener->port());
    const auto start = std::chrono::steady_clock::now();
    CHECK(silent.wait_eof(3s));
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(took >= 150ms);
    CHECK(took < 1500ms);
    CHECK(f.listener->stats().handshake_timeouts == 1);
    CHECK(f.eventually([&] { return f.listener->stats().open == 0; }));
    if (!tls) {
      // A client that speaks in time stays.
      RawPeer fine(f.listener->port());
      fine.write(preface_and_settings());
      REQUIRE(fine.read_until(4, 2s));
      std::this_thread::sleep_for(300ms);
      CHECK(f.listener->stats().open == 1);
      CHECK(f.listener->stats().handshake_timeouts == 1);
    }
  }
}

TEST_CASE("h2 listener: connections beyond max_connections are closed at once and counted") {
  ListenerOptions o;
  o.max_connections = 2;
  Fixture f(o);
  f.listener->listen_tcp("127.0.0.1", 0);
  auto a = std::make_unique<RawPeer>(f.listener->port());
  RawPeer b(f.listener->port());
  for (RawPeer* p : {a.get(), &b}) {
    p->write(preface_and_settings());
    REQUIRE(p->read_until(4, 2s));
  }
  RawPeer c(f.listener->port());
  CHECK(c.wait_eof(2s));
  CHECK(f.listener->stats().refused == 1);
  CHECK(f.listener->stats().open == 2);
  a.reset();  // one leaves: room for another
  REQUIRE(f.eventually([&] { return f.listener->stats().open == 1; }));
  RawPeer d(f.listener->port());
  d.write(preface_and_settings());
  CHECK(d.read_until(4, 2s));
  CHECK(f.listener->stats().refused == 1);
  CHECK(f.listener->stats().accepted == 3);
}

TEST_CASE("h2 listener: a graceful stop sends GOAWAY, lets open calls finish, then closes") {
  Fixture f;
  f.listener->listen_tcp("127.0.0.1", 0);
  auto ch = channel("127.0.0.1:" + std::to_string(f.listener->port()), false);
  auto stub = AgentService::NewStub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  auto stream = stub->Connect(&ctx);
  round_trip(*stream, 1);
  REQUIRE(ch->GetState(false) == GRPC_CHANNEL_READY);
  // A raw client on the same listener reads the GOAWAY itself.
  RawPeer raw(f.listener->port());
  raw.write(preface_and_settings());
  REQUIRE(raw.read_until(4, 2s));
  const auto start = std::chrono::steady_clock::now();
  auto stopped = std::async(std::launch::async, [&] { f.listener->stop(5s); });
  auto goaway = raw.read_until(7, 2s);
  REQUIRE(goaway);
  CHECK(goaway->payload.substr(4, 4) == std::string(4, '\0'));  // NO_ERROR
  CHECK(raw.wait_eof(2s));
  // The open call goes on, and the client sees the GOAWAY: its connection is no longer one to
  // start calls on (the synchronous client reads its connection only during calls, so the
  // round trips also let it read).
  bool seen = false;
  for (int i = 2; i < 200 && !seen; ++i) {
    round_trip(*stream, i);
    seen = ch->GetState(false) != GRPC_CHANNEL_READY;
    if (!seen) std::this_thread::sleep_for(10ms);
  }
  CHECK(seen);
  round_trip(*stream, 1000);
  REQUIRE(stream->WritesDone());
  CHECK(stream->Finish().ok());
  REQUIRE(stopped.wait_for(3s) == std::future_status::ready);
  CHECK(std::chrono::steady_clock::now() - start < 4s);
  CHECK(f.listener->stats().open == 0);
  // Nothing listens any more.
  grpc::ClientContext again;
  again.set_deadline(std::chrono::system_clock::now() + 500ms);
  auto refused = stub->Connect(&again);
  Packet p;
  CHECK_FALSE(refused->Read(&p));
  CHECK(refused->Finish().error_code() != grpc::StatusCode::OK);
}

TEST_CASE("h2 listener: a graceful stop closes the calls still open after the grace period") {
  Fixture f;
  f.listener->listen_tcp("127.0.0.1", 0);
  auto ch = channel("127.0.0.1:" + std::to_string(f.listener->port()), false);
  auto stub = AgentService::NewStub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  auto stream = stub->Connect(&ctx);
  round_trip(*stream, 1);
  const auto start = std::chrono::steady_clock::now();
  f.listener->stop(300ms);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 250ms);
  CHECK(took < 2s);
  Packet p;
  CHECK_FALSE(stream->Read(&p));
  CHECK(stream->Finish().error_code() == grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE(
    "h2 listener: a client that PINGs too often gets GOAWAY ENHANCE_YOUR_CALM "
    "too_many_pings") {
  ListenerOptions o;
  o.connection.min_peer_ping_interval = 10s;
  Fixture f(o);
  f.listener->listen_tcp("127.0.0.1", 0);
  RawPeer peer(f.listener->port());
  peer.write(preface_and_settings());
  const std::string ping_payload(8, 'p');
  // The first PING and two strikes are answered.
  for (int i = 0; i < 3; ++i) {
    peer.write(frame(6, 0, 0, ping_payload));
    auto ack = peer.read_until(6, 2s);
    REQUIRE(ack);
    CHECK((ack->flags & 1) != 0);
  }
  // The third strike ends the connection.
  peer.write(frame(6, 0, 0, ping_payload));
  auto goaway = peer.read_until(7, 2s);
  REQUIRE(goaway);
  REQUIRE(goaway->payload.size() >= 8);
  const auto code = (static_cast<uint32_t>(static_cast<uint8_t>(goaway->payload[4])) << 24) |
                    (static_cast<uint32_t>(static_cast<uint8_t>(goaway->payload[5])) << 16) |
                    (static_cast<uint32_t>(static_cast<uint8_t>(goaway->payload[6])) << 8) |
                    static_cast<uint32_t>(static_cast<uint8_t>(goaway->payload[7]));
  CHECK(code == 0xb);  // ENHANCE_YOUR_CALM
  CHECK(goaway->payload.substr(8) == "too_many_pings");
  CHECK(peer.wait_eof(2s));
}

TEST_CASE("h2 listener: PINGs between responses are not strikes") {
  ListenerOptions o;
  o.connection.min_peer_ping_interval = 10s;
  Fixture f(o);
  f.listener->listen_tcp("127.0.0.1", 0);
  RawPeer peer(f.listener->port());
  peer.write(preface_and_settings());
  peer.write(frame(1, 4, 1, grpc_request_block("/AgentService/Connect")));  // END_HEADERS
  const std::string message = std::string("\0\0\0\0\1", 5) + "x";
  const std::string ping_payload(8, 'p');
  // Each PING follows a response DATA frame: as grpc-go and gRPC C++ count, no strike.
  for (int i = 0; i < 6; ++i) {
    peer.write(frame(0, 0, 1, message));
    REQUIRE(peer.read_until(0, 2s));
    peer.write(frame(6, 0, 0, ping_payload));
    auto ack = peer.read_until(6, 2s);
    REQUIRE(ack);
    CHECK((ack->flags & 1) != 0);
  }
  CHECK(f.listener->stats().open == 1);
}

TEST_CASE(
    "h2 listener: on a dual-stack socket an IPv4 peer is shown as IPv4, and an owner may "
    "refuse a peer") {
  Fixture f;
  f.listener->listen_tcp("", 0);
  {
    std::lock_guard lock(f.mu);
    f.refuse = true;
  }
  RawPeer peer(f.listener->port());
  CHECK(peer.wait_eof(2s));
  auto peers = f.seen();
  REQUIRE(peers.size() == 1);
  CHECK(peers[0].address.rfind("127.0.0.1:", 0) == 0);
  CHECK(f.eventually([&] { return f.listener->stats().open == 0; }));
  CHECK(f.listener->stats().accepted == 0);
}

namespace {

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

}  // namespace

TEST_CASE(
    "h2 listener: a connection in line for a handshake slot is closed at the line's deadline, or "
    "as soon as its client gives up") {
  ListenerOptions o;
  o.max_handshakes_per_worker = 1;  // two workers: two slots
  o.handshake_timeout = 5s;
  o.handshake_slot_hold = 10s;
  o.handshake_line_timeout = 500ms;
  Fixture f(o);
  f.listener->set_tls_context(mtls_context());
  f.listener->listen_tcp("127.0.0.1", 0);
  std::vector<std::unique_ptr<RawPeer>> peers;
  for (int i = 0; i < 3; ++i) {
    peers.push_back(std::make_unique<RawPeer>(f.listener->port()));
    peers.back()->write(std::string("\x16\x03\x01\x02\x00", 5));  // a ClientHello's start
    if (i == 1) REQUIRE(f.eventually([&] { return f.listener->stats().handshaking == 2; }));
  }
  REQUIRE(f.eventually([&] { return f.listener->stats().admission_waits == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(peers[2]->wait_eof(3s));
  // One more in line whose client gives up: closed within the line's check (1 s), unread.
  RawPeer quitter(f.listener->port());
  quitter.write(std::string("\x16\x03\x01\x02\x00", 5));
  REQUIRE(f.eventually([&] { return f.listener->stats().admission_waits == 2; }));
  quitter.socket().close();
  CHECK(f.eventually([&] { return f.listener->stats().abandoned == 1; }, 3s));
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK(f.eventually([&] { return f.listener->stats().open == 2; }));
  const auto s = f.listener->stats();
  CHECK(s.handshake_timeouts == 1);
  CHECK(s.handshake_failures == 0);
  CHECK(s.handshaking == 2);  // the slot holders go on, within their own deadline
}

TEST_CASE(
    "h2 listener: handshake admission gives slots to clients that spoke, newest first, for a bounded "
    "hold: silent and stalled clients shut no one out (issue 42)") {
  ListenerOptions o;
  o.max_handshakes_per_worker = 2;  // two workers: at most 4 TLS handshakes hold a slot
  o.handshake_timeout = 3s;
  o.handshake_slot_hold = 300ms;
  Fixture f(o);
  REQUIRE(f.listener->handshake_bound() == 4);
  f.listener->set_tls_context(mtls_context());
  f.listener->listen_tcp("127.0.0.1", 0);
  const std::string target = "127.0.0.1:" + std::to_string(f.listener->port());

  // A peer connected before the storm.
  auto ch = channel(target, true);
  auto stub = AgentService::NewStub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  auto stream = stub->Connect(&ctx);
  round_trip(*stream, 1);
  REQUIRE(f.eventually([&] { return f.listener->stats().handshaking == 0; }));
  const size_t fds_before = open_descriptors();

  // Clients that connect and never send a byte hold no slot: a real client goes straight in.
  constexpr int kSilent = 16;
  std::vector<std::unique_ptr<RawPeer>> stalled;
  for (int i = 0; i < kSilent; ++i) stalled.push_back(std::make_unique<RawPeer>(f.listener->port()));
  REQUIRE(f.eventually([&] { return f.listener->stats().open == 1 + kSilent; }));
  CHECK(try_one_call(channel(target, true), 2s) == "");
  CHECK(f.listener->stats().admission_waits == 0);

  // Clients that send the start of a ClientHello and stall: four take the slots, four wait.
  constexpr int kPartial = 8;
  for (int i = 0; i < kPartial; ++i) {
    stalled.push_back(std::make_unique<RawPeer>(f.listener->port()));
    stalled.back()->write(std::string("\x16\x03\x01\x02\x00", 5));
  }
  REQUIRE(f.eventually([&] { return f.listener->stats().admission_waits >= 4; }));
  CHECK(f.listener->stats().handshaking == 4);
  // A real client behind them gets a slot as the holds run out, well before its deadline.
  const auto t0 = std::chrono::steady_clock::now();
  auto late =
      std::async(std::launch::async, [&] { return try_one_call(channel(target, true), 15s); });
  // The connected peer is served meanwhile.
  for (int64_t id = 2; id < 6; ++id) {
    round_trip(*stream, id);
    CHECK(f.listener->stats().handshaking <= 4);
  }
  REQUIRE(late.wait_for(20s) == std::future_status::ready);
  CHECK(late.get() == "");
  CHECK(std::chrono::steady_clock::now() - t0 < 2500ms);
  for (auto& p : stalled) CHECK(p->wait_eof(10s));
  auto s = f.listener->stats();
  CHECK(s.handshaking_peak <= 4);
  CHECK(s.slot_hold_expiries >= kPartial);
  CHECK(s.handshake_timeouts == kSilent + kPartial);
  CHECK(s.handshake_failures == 0);
  CHECK(s.accepted == 3);
  CHECK(s.handshaking == 0);

  // Clients that gave up while they waited in the listen backlog (the acceptor's thread busy
  // here): closed unread when accepted, no handshake begun.
  constexpr int kGaveUp = 3;
  std::promise<void> release;
  asio::post(f.accept_loop.ctx(), [gate = release.get_future().share()] { gate.wait(); });
  for (int i = 0; i < kGaveUp; ++i) {
    RawPeer gave_up(f.listener->port());
    gave_up.write(std::string("\x16\x03\x01\x00\x05hello", 10));
  }
  std::this_thread::sleep_for(50ms);
  release.set_value();
  CHECK(f.eventually([&] { return f.listener->stats().abandoned == kGaveUp; }));

  // Every stalled connection's descriptor came back.
  stalled.clear();
  REQUIRE(f.eventually([&] { return f.listener->stats().open == 1; }));
  CHECK(f.eventually([&] { return open_descriptors() <= fds_before; }));
  round_trip(*stream, 9);
  REQUIRE(stream->WritesDone());
  CHECK(stream->Finish().ok());
}
