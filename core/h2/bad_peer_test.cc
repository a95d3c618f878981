// Misbehaving HTTP/2 peers, written frame by frame, against our server and client roles. Each
// gets a clear error and the Connection's thread keeps serving others.

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <poll.h>

#include <asio/read.hpp>
#include <catch2/catch.hpp>

#include "core/h2/connection.h"
#include "core/h2/h2_test_peer.h"
#include "tests/support/log_capture.h"

using namespace std::chrono_literals;
using konn::core::h2::CallInfo;
using konn::core::h2::Connection;
using konn::core::h2::ConnectionOptions;
using konn::core::h2::grpc_frame;
using konn::core::h2::GrpcStatus;
using konn::core::h2::Metadata;
using konn::core::h2::Stream;
using konn::core::h2::StreamCallbacks;
using namespace konn::core::h2::testing;

namespace {

uint32_t u32(const std::string& s, size_t at) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])); };
  return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}

// An echo service that records how its streams ended.
struct Recorder {
  std::mutex mu;
  std::vector<GrpcStatus> ends;
  std::vector<std::string> authorities;
  std::vector<GrpcStatus> snapshot() {
    std::lock_guard lock(mu);
    return ends;
  }
  bool wait(size_t n) {
    for (int i = 0; i < 2500; ++i) {
      if (snapshot().size() >= n) return true;
      std::this_thread::sleep_for(2ms);
    }
    return false;
  }
  Connection::CallHandler handler() {
    return [this](const std::shared_ptr<Stream>& s, const CallInfo& info) {
      {
        std::lock_guard lock(mu);
        authorities.push_back(info.authority);
      }
      std::weak_ptr<Stream> w = s;
      StreamCallbacks cb;
      cb.on_message = [w](std::string&& m) {
        if (auto live = w.lock()) live->send_message(m);
      };
      cb.on_half_close = [w] {
        if (auto live = w.lock()) live->finish({0, ""});
      };
      cb.on_end = [this](const GrpcStatus& st, const Metadata&) {
        std::lock_guard lock(mu);
        ends.push_back(st);
      };
      s->set_callbacks(std::move(cb));
    };
  }
};

// A raw client past the preface: its SETTINGS sent, the server's read and acknowledged.
void handshake(RawPeer& peer) {
  peer.write(std::string(kPreface) + frame(kSettings, 0, 0, ""));
  auto f = peer.read_until(kSettings);
  REQUIRE(f);
  peer.write(frame(kSettings, kAck, 0, ""));
}

// Our server still serves a whole call on a new connection.
void server_still_serves(uint16_t port) {
  Loop loop;
  auto conn = connect_client(loop, Kind::Tcp, "127.0.0.1:" + std::to_string(port));
  ClientCall call(loop, conn, "/AgentService/Connect", {});
  call.send("still here");
  REQUIRE(call.wait_messages(1));
  call.half_close();
  auto r = call.wait_end();
  REQUIRE(r);
  CHECK(r->status.ok());
}

template <typename Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 2500 && !pred(); ++i) std::this_thread::sleep_for(2ms);
  return pred();
}

bool has_reason(H2Server& server, const std::string& text) {
  for (int i = 0; i < 2500; ++i) {
    for (const auto& r : server.close_reasons()) {
      if (r.find(text) != std::string::npos) return true;
    }
    std::this_thread::sleep_for(2ms);
  }
  return false;
}

}  // namespace

TEST_CASE("h2 server: a frame larger than SETTINGS_MAX_FRAME_SIZE is a FRAME_SIZE_ERROR GOAWAY",
          "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  peer.write(frame(kHeaders, kEndHeaders, 1, grpc_request_block("/AgentService/Connect")));
  // 16385 bytes of DATA: one more than the default SETTINGS_MAX_FRAME_SIZE we advertise.
  peer.write(frame(kData, 0, 1, std::string(16385, 'x')));
  auto goaway = peer.read_until(kGoaway);
  REQUIRE(goaway);
  CHECK(u32(goaway->payload, 4) == 0x6);  // FRAME_SIZE_ERROR
  CHECK(peer.wait_eof());
  REQUIRE(rec.wait(1));
  CHECK(rec.snapshot()[0].code == 14);  // the open stream ends UNAVAILABLE
  server_still_serves(server.port());
}

TEST_CASE("h2 server: invalid request headers reset that stream only", "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  SECTION("an uppercase header name") {
    peer.write(frame(kHeaders, kEndHeaders, 1,
                     grpc_request_block("/AgentService/Connect") + hpack_literal("AgentID", "a")));
  }
  SECTION("a connection-specific header") {
    peer.write(frame(
        kHeaders, kEndHeaders, 1,
        grpc_request_block("/AgentService/Connect") + hpack_literal("connection", "keep-alive")));
  }
  SECTION("no :path") {
    peer.write(frame(kHeaders, kEndHeaders, 1,
                     std::string("\x83\x86") + hpack_literal(":authority", "x") +
                         hpack_literal("content-type", "application/grpc")));
  }
  SECTION("CR LF in :authority") {
    peer.write(frame(kHeaders, kEndHeaders, 1,
                     grpc_request_block("/AgentService/Connect", "a\r\nx-injected: 1")));
  }
  SECTION("NUL in a header value") {
    peer.write(frame(kHeaders, kEndHeaders, 1,
                     grpc_request_block("/AgentService/Connect") +
                         hpack_literal("agentid", std::string("a\0b", 3))));
  }
  SECTION("LF in a header name") {
    peer.write(frame(kHeaders, kEndHeaders, 1,
                     grpc_request_block("/AgentService/Connect") + hpack_literal("a\nb", "1")));
  }
  SECTION("te other than trailers") {
    peer.write(frame(kHeaders, kEndHeaders, 1,
                     std::string("\x83\x86") + hpack_literal(":path", "/AgentService/Connect") +
                         hpack_literal(":authority", "x") + hpack_literal("te", "gzip")));
  }
  SECTION("transfer-encoding") {
    peer.write(frame(kHeaders, kEndHeaders, 1,
                     grpc_request_block("/AgentService/Connect") +
                         hpack_literal("transfer-encoding", "chunked")));
  }
  SECTION("a pseudo-header after a regular one") {
    peer.write(frame(kHeaders, kEndHeaders, 1,
                     grpc_request_block("/AgentService/Connect") + hpack_literal(":path", "/x")));
  }
  SECTION("an unknown pseudo-header") {
    peer.write(frame(kHeaders, kEndHeaders, 1,
                     hpack_literal(":foo", "1") + grpc_request_block("/AgentService/Connect")));
  }
  auto rst = peer.read_until(kRstStream);
  REQUIRE(rst);
  CHECK(rst->stream_id == 1);
  CHECK(u32(rst->payload, 0) == 0x1);  // PROTOCOL_ERROR
  // The connection lives on: a PING is answered, and a valid call on it works.
  peer.write(frame(kPing, 0, 0, "12345678"));
  auto pong = peer.read_until(kPing);
  REQUIRE(pong);
  CHECK(pong->flags == kAck);
  peer.write(frame(kHeaders, kEndHeaders, 3, grpc_request_block("/AgentService/Connect")));
  peer.write(frame(kData, kEndStream, 3, grpc_frame("ok")));
  auto headers = peer.read_until(kHeaders);
  REQUIRE(headers);
  CHECK(headers->stream_id == 3);
  auto data = peer.read_until(kData);
  REQUIRE(data);
  CHECK(data->payload == grpc_frame("ok"));
  REQUIRE(rec.wait(1));
  CHECK(rec.snapshot()[0].ok());
}

TEST_CASE("h2 server: every :authority a gRPC client may send is accepted", "[h2][bad-peer]") {
  // kube-apiserver 1.20's grpc-go (1.27) sends the unix socket path it dialled; others send
  // localhost, host:port, nothing, or a percent-encoded target.
  const std::string authority =
      GENERATE(std::string("/etc/kubernetes/konnectivity-server/konnectivity-server.socket"),
               std::string("localhost"), std::string("127.0.0.1:8090"), std::string("[::1]:8131"),
               std::string(""), std::string("%2Frun%2Fkonn%20server.sock"),
               std::string("unix:///tmp/konn.sock"));
  CAPTURE(authority);
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  peer.write(frame(kHeaders, kEndHeaders, 1,
                   grpc_request_block("/AgentService/Connect", authority)));
  peer.write(frame(kData, kEndStream, 1, grpc_frame("ok")));
  auto headers = peer.read_until(kHeaders);
  REQUIRE(headers);
  CHECK(konn::core::h2::find_metadata(peer.decode_headers(*headers), ":status") == "200");
  auto data = peer.read_until(kData);
  REQUIRE(data);
  CHECK(data->payload == grpc_frame("ok"));
  REQUIRE(rec.wait(1));
  CHECK(rec.snapshot()[0].ok());
  std::lock_guard lock(rec.mu);
  CHECK(rec.authorities == std::vector<std::string>{authority});
}

TEST_CASE("h2 server: a pseudo-header in trailers resets the stream", "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  peer.write(frame(kHeaders, kEndHeaders, 1, grpc_request_block("/AgentService/Connect")));
  peer.write(frame(kHeaders, kEndHeaders | kEndStream, 1, hpack_literal(":path", "/x")));
  auto rst = peer.read_until(kRstStream);
  REQUIRE(rst);
  CHECK(rst->stream_id == 1);
  CHECK(u32(rst->payload, 0) == 0x1);  // PROTOCOL_ERROR
  REQUIRE(rec.wait(1));
  CHECK(rec.snapshot()[0].code == konn::core::h2::grpc_code::kInternal);
}

TEST_CASE("h2 server: trailers without END_STREAM reset the stream", "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  peer.write(frame(kHeaders, kEndHeaders, 1, grpc_request_block("/AgentService/Connect")));
  peer.write(frame(kHeaders, kEndHeaders, 1, hpack_literal("x-trailer", "1")));
  auto rst = peer.read_until(kRstStream);
  REQUIRE(rst);
  CHECK(rst->stream_id == 1);
  CHECK(u32(rst->payload, 0) == 0x1);  // PROTOCOL_ERROR
}

TEST_CASE("h2 server: HEADERS on a stream id below an earlier one is a PROTOCOL_ERROR GOAWAY",
          "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  peer.write(frame(kHeaders, kEndHeaders, 5, grpc_request_block("/AgentService/Connect")));
  peer.write(frame(kHeaders, kEndHeaders, 3, grpc_request_block("/AgentService/Connect")));
  auto goaway = peer.read_until(kGoaway);
  REQUIRE(goaway);
  CHECK(u32(goaway->payload, 4) == 0x1);  // PROTOCOL_ERROR
  CHECK(peer.wait_eof());
  CHECK(has_reason(server, "below the client's stream 5"));
}

TEST_CASE("h2 server: DATA after the client reset its stream is a STREAM_CLOSED GOAWAY",
          "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  peer.write(frame(kHeaders, kEndHeaders, 1, grpc_request_block("/AgentService/Connect")));
  peer.write(frame(kRstStream, 0, 1, be32(0x8)));  // CANCEL
  REQUIRE(rec.wait(1));                             // the reset was taken
  peer.write(frame(kData, 0, 1, grpc_frame("late")));
  auto goaway = peer.read_until(kGoaway);
  REQUIRE(goaway);
  CHECK(u32(goaway->payload, 4) == 0x5);  // STREAM_CLOSED
  CHECK(peer.wait_eof());
}

TEST_CASE("h2 server: after the client's GOAWAY the connection ends with a FIN, not a reset",
          "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  peer.write(frame(kGoaway, 0, 0, be32(0) + be32(0)));
  // The server does not close at once under the client (with what the client sends next unread
  // that close would be a reset): it reads on until the client closes, or a second passes.
  std::error_code ec;
  char buf[4096];
  const auto early = std::chrono::steady_clock::now() + 300ms;
  while (!ec && std::chrono::steady_clock::now() < early) {
    pollfd pfd{peer.socket().native_handle(), POLLIN, 0};
    if (::poll(&pfd, 1, 50) > 0) peer.socket().read_some(asio::buffer(buf), ec);  // frames sent
  }
  REQUIRE_FALSE(ec);  // still open
  peer.write(frame(kPing, 0, 0, std::string("h2spec\0\0", 8)));
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!ec && std::chrono::steady_clock::now() < until) {
    pollfd pfd{peer.socket().native_handle(), POLLIN, 0};
    if (::poll(&pfd, 1, 100) > 0) peer.socket().read_some(asio::buffer(buf), ec);
  }
  CHECK(ec == asio::error::eof);
}

TEST_CASE("h2 server: the rest of a request answered with an HTTP error is still checked",
          "[h2][bad-peer]") {
  // A request that is not gRPC is answered at once (415) but not reset, so what the client sends
  // next gets the same error whether or not it arrived in the same read as the request.
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  const std::string post = std::string("\x83\x86") + hpack_literal(":path", "/") +
                           hpack_literal(":authority", "x");
  SECTION("a content-length the DATA does not match") {
    peer.write(frame(kHeaders, kEndHeaders, 1, post + hpack_literal("content-length", "1")));
    auto h = peer.read_until(kHeaders);
    REQUIRE(h);
    CHECK(konn::core::h2::find_metadata(peer.decode_headers(*h), ":status") == "415");
    std::this_thread::sleep_for(20ms);  // the answer went out before the rest arrives
    peer.write(frame(kData, kEndStream, 1, "too long"));
  }
  SECTION("a second header block without END_STREAM") {
    peer.write(frame(kHeaders, kEndHeaders, 1, post));
    auto h = peer.read_until(kHeaders);
    REQUIRE(h);
    std::this_thread::sleep_for(20ms);
    peer.write(frame(kHeaders, kEndHeaders, 1, hpack_literal("x-trailer", "1")));
  }
  auto rst = peer.read_until(kRstStream);
  REQUIRE(rst);
  CHECK(rst->stream_id == 1);
  CHECK(u32(rst->payload, 0) == 0x1);  // PROTOCOL_ERROR
  CHECK(rec.snapshot().empty());
}

TEST_CASE("h2 server: the longest grpc-timeout a client can write leaves the call open",
          "[h2][bad-peer]") {
  // "99999999H" is 11 000 years: as nanoseconds it does not fit a steady_clock duration, and the
  // call must not end at once with DEADLINE_EXCEEDED (found by h2_connection_fuzz).
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  peer.write(frame(
      kHeaders, kEndHeaders, 1,
      grpc_request_block("/AgentService/Connect") + hpack_literal("grpc-timeout", "99999999H")));
  peer.write(frame(kData, 0, 1, grpc_frame("ok")));
  auto headers = peer.read_until(kHeaders);
  REQUIRE(headers);
  CHECK(headers->flags == kEndHeaders);  // response headers, not trailers
  auto data = peer.read_until(kData);
  REQUIRE(data);
  CHECK(data->payload == grpc_frame("ok"));
  std::this_thread::sleep_for(50ms);
  CHECK(rec.snapshot().empty());
  peer.write(frame(kData, kEndStream, 1, ""));
  REQUIRE(rec.wait(1));
  CHECK(rec.snapshot()[0].ok());
}

TEST_CASE("h2 server: a request that is not gRPC gets an HTTP error", "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  // GET (index 2) with a gRPC content-type: 405.
  peer.write(frame(kHeaders, kEndHeaders | kEndStream, 1,
                   std::string("\x82\x86") + hpack_literal(":path", "/AgentService/Connect") +
                       hpack_literal(":authority", "x")));
  auto h = peer.read_until(kHeaders);
  REQUIRE(h);
  CHECK((h->flags & kEndStream) != 0);
  CHECK(konn::core::h2::find_metadata(peer.decode_headers(*h), ":status") == "405");
  CHECK(rec.snapshot().empty());
}

TEST_CASE("h2 server: a SETTINGS flood ends the connection with ENHANCE_YOUR_CALM",
          "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  std::string flood(kPreface);
  for (int i = 0; i < 20000; ++i) flood += frame(kSettings, 0, 0, "");
  // The peer writes and never reads: every SETTINGS ACK we owe piles up until the limit.
  std::thread writer([&] {
    try {
      peer.write(flood);
    } catch (const std::exception&) {
      // The server closed first.
    }
  });
  writer.join();
  CHECK(has_reason(server, "Flooding was detected"));
  CHECK(peer.wait_eof());
  server_still_serves(server.port());
}

TEST_CASE("h2 server: a stream reset mid-message ends that stream CANCELLED", "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  peer.write(frame(kHeaders, kEndHeaders, 1, grpc_request_block("/AgentService/Connect")));
  peer.write(frame(kData, 0, 1, grpc_frame(std::string(1000, 'a')).substr(0, 600)));
  peer.write(frame(kRstStream, 0, 1, be32(0x8)));  // CANCEL
  REQUIRE(rec.wait(1));
  CHECK(rec.snapshot()[0].code == 1);
  // The connection stays up.
  peer.write(frame(kPing, 0, 0, "abcdefgh"));
  REQUIRE(peer.read_until(kPing));
}

TEST_CASE("h2 server: a client that ends its stream mid-message gets INTERNAL", "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  peer.write(frame(kHeaders, kEndHeaders, 1, grpc_request_block("/AgentService/Connect")));
  peer.write(frame(kData, kEndStream, 1, grpc_frame("abc").substr(0, 6)));
  auto trailers = peer.read_until(kHeaders);
  REQUIRE(trailers);
  // Trailers-only answer (nothing was sent before): grpc-status 13.
  CHECK((trailers->flags & kEndStream) != 0);
  const auto fields = peer.decode_headers(*trailers);
  CHECK(konn::core::h2::find_metadata(fields, "grpc-status") == "13");
  CHECK(konn::core::h2::find_metadata(fields, "grpc-message") ==
        "the client's stream ended in the middle of a message");
  REQUIRE(rec.wait(1));
  CHECK(rec.snapshot()[0].code == 13);
}

TEST_CASE("h2 server: a compressed message is refused with INTERNAL", "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  peer.write(frame(kHeaders, kEndHeaders, 1, grpc_request_block("/AgentService/Connect")));
  std::string compressed = grpc_frame("zz");
  compressed[0] = 1;
  peer.write(frame(kData, 0, 1, compressed));
  auto trailers = peer.read_until(kHeaders);
  REQUIRE(trailers);
  const auto fields = peer.decode_headers(*trailers);
  CHECK(konn::core::h2::find_metadata(fields, "grpc-status") == "13");
  CHECK(konn::core::h2::find_metadata(fields, "grpc-message") ==
        "compressed gRPC message received, but no grpc-encoding was negotiated");
  REQUIRE(rec.wait(1));
  CHECK(rec.snapshot()[0].code == 13);
}

TEST_CASE("h2 server: a peer that stops reading holds bounded memory and is closed by keepalive",
          "[h2][bad-peer][flow]") {
  // The service sends 64 KiB messages whenever its queue drains, forever.
  std::atomic<size_t> max_held{0};
  std::atomic<int> sent{0};
  std::shared_ptr<std::function<void()>> keep;
  ConnectionOptions opts;
  opts.keepalive_interval = 100ms;
  opts.keepalive_timeout = 200ms;
  std::atomic<int> calls{0};
  Recorder echo;
  H2Server server(
      Kind::Tcp,
      [&](const std::shared_ptr<Stream>& s, const CallInfo& info) {
        if (++calls > 1) {
          echo.handler()(s, info);  // later calls: the proof that the server still serves
          return;
        }
        std::weak_ptr<Stream> w = s;
        auto pump = [w, &max_held, &sent, &server] {
          auto live = w.lock();
          if (!live) return;
          while (live->queued_bytes() < 64 * 1024 &&
                 live->send_message(std::string(64 * 1024, 'p'))) {
            ++sent;
          }
          size_t held = live->queued_bytes();
          for (auto& c : server.connections()) held += c->write_buffer_bytes();
          if (held > max_held) max_held = held;
        };
        s->set_on_drained(pump);
        pump();
      },
      opts);
  RawPeer peer(server.port());
  // Windows as large as HTTP/2 allows, then nothing is read again.
  peer.write(std::string(kPreface) +
             frame(kSettings, 0, 0, std::string("\x00\x04\x7f\xff\xff\xff", 6)) +
             frame(kWindowUpdate, 0, 0, be32(0x7fffffff - 65535)) +
             frame(kHeaders, kEndHeaders, 1, grpc_request_block("/AgentService/Connect")));
  CHECK(has_reason(server, "keepalive PING not acknowledged within 200 ms"));
  CHECK(sent > 0);
  // One write buffer (256 KiB batch, plus the frame that crossed it) and one queued message.
  CHECK(max_held <= 256 * 1024 + 16 * 1024 + 64 * 1024 + 5 + 64 * 1024);
  server_still_serves(server.port());
}

TEST_CASE("h2 client: bad answers from a raw server", "[h2][bad-peer]") {
  asio::io_context accept_ctx;
  asio::ip::tcp::acceptor acceptor(accept_ctx, {asio::ip::make_address("127.0.0.1"), 0});
  const uint16_t port = acceptor.local_endpoint().port();
  Loop loop;
  auto conn = connect_client(loop, Kind::Tcp, "127.0.0.1:" + std::to_string(port));
  RawPeer server(acceptor.accept());
  // The client's preface, then its SETTINGS.
  std::string preface(24, '\0');
  asio::read(server.socket(), asio::buffer(preface));
  REQUIRE(preface == kPreface);
  server.write(frame(kSettings, 0, 0, ""));
  ClientCall call(loop, conn, "/AgentService/Connect", {});
  auto headers = server.read_until(kHeaders);
  REQUIRE(headers);
  const uint32_t id = headers->stream_id;
  const std::string response_headers =
      std::string("\x88") + hpack_literal("content-type", "application/grpc");
  SECTION("trailers without grpc-status") {
    server.write(frame(kHeaders, kEndHeaders, id, response_headers));
    server.write(frame(kData, 0, id, grpc_frame("one")));
    server.write(frame(kHeaders, kEndHeaders | kEndStream, id, hpack_literal("foo", "bar")));
    auto r = call.wait_end();
    REQUIRE(r);
    CHECK(r->status.code == 13);
    CHECK(r->status.message == "the server's trailers have no grpc-status");
    CHECK(r->messages == std::vector<std::string>{"one"});
  }
  SECTION("END_STREAM on DATA, no trailers") {
    server.write(frame(kHeaders, kEndHeaders, id, response_headers));
    server.write(frame(kData, kEndStream, id, grpc_frame("one")));
    auto r = call.wait_end();
    REQUIRE(r);
    CHECK(r->status.code == 13);
    CHECK(r->status.message == "the server ended the stream without trailers (no grpc-status)");
  }
  SECTION("an HTTP 503 without grpc-status is UNAVAILABLE") {
    server.write(frame(kHeaders, kEndHeaders | kEndStream, id,
                       std::string("\x08\x03") + "503"));  // :status 503 (literal, indexed name)
    auto r = call.wait_end();
    REQUIRE(r);
    CHECK(r->status.code == 14);
  }
  SECTION("a stream reset mid-message") {
    server.write(frame(kHeaders, kEndHeaders, id, response_headers));
    server.write(frame(kData, 0, id, grpc_frame("abcdef").substr(0, 7)));
    server.write(frame(kRstStream, 0, id, be32(0x2)));  // INTERNAL_ERROR
    auto r = call.wait_end();
    REQUIRE(r);
    CHECK(r->status.code == 13);
    CHECK(r->status.message == "stream reset with HTTP/2 error INTERNAL_ERROR (2)");
  }
  SECTION("GOAWAY with an error ends the connection's calls UNAVAILABLE") {
    server.write(frame(kGoaway, 0, 0, be32(0) + be32(0x1)));
    auto r = call.wait_end();
    REQUIRE(r);
    CHECK(r->status.code == 14);
  }
  // The client side's thread is still usable: a fresh connection can be made on it.
  CHECK(loop.run([] { return 1; }) == 1);
}

TEST_CASE("h2 server: a PING flood ends the connection with ENHANCE_YOUR_CALM", "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  std::string flood(kPreface);
  flood += frame(kSettings, 0, 0, "");
  for (int i = 0; i < 20000; ++i) flood += frame(kPing, 0, 0, "pingpong");
  try {
    peer.write(flood);
  } catch (const std::exception&) {
    // The server closed first.
  }
  CHECK(has_reason(server, "Flooding was detected"));
  CHECK(peer.wait_eof());
  server_still_serves(server.port());
}

TEST_CASE("h2 server: a header block over 64 KiB resets that stream", "[h2][bad-peer]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  std::string block = grpc_request_block("/AgentService/Connect");
  for (int i = 0; i < 700; ++i)
    block += hpack_literal("x-pad-" + std::to_string(i), std::string(100, 'v'));
  // Sent as HEADERS + CONTINUATIONs of at most 16 KiB each.
  const size_t kMax = 16384;
  for (size_t off = 0; off < block.size(); off += kMax) {
    const bool first = off == 0;
    const bool last = off + kMax >= block.size();
    peer.write(frame(first ? kHeaders : 9, last ? kEndHeaders : 0, 1, block.substr(off, kMax)));
  }
  auto rst = peer.read_until(kRstStream);
  REQUIRE(rst);
  CHECK(rst->stream_id == 1);
  CHECK(rec.snapshot().empty());
  // The connection lives on.
  peer.write(frame(kPing, 0, 0, "12345678"));
  REQUIRE(peer.read_until(kPing));
}

TEST_CASE("h2 server: the peer's SETTINGS_INITIAL_WINDOW_SIZE bounds what is sent", "[h2][flow]") {
  H2Server server(Kind::Tcp, [](const std::shared_ptr<Stream>& s, const CallInfo&) {
    s->send_message(std::string(5000, 'w'));
    s->finish({0, ""});
  });
  RawPeer peer(server.port());
  // SETTINGS_INITIAL_WINDOW_SIZE (4) = 1000.
  peer.write(std::string(kPreface) +
             frame(kSettings, 0, 0, std::string("\x00\x04\x00\x00\x03\xe8", 6)));
  REQUIRE(peer.read_until(kSettings));
  peer.write(frame(kSettings, kAck, 0, ""));
  peer.write(
      frame(kHeaders, kEndHeaders | kEndStream, 1, grpc_request_block("/AgentService/Connect")));
  size_t got = 0;
  while (got < 1000) {
    auto f = peer.read_frame(2s);
    REQUIRE(f);
    if (f->type == kData) got += f->payload.size();
  }
  CHECK(got == 1000);
  // Nothing more until the window grows.
  auto more = peer.read_frame(100ms);
  CHECK((!more || more->type != kData));
  peer.write(frame(kWindowUpdate, 0, 1, be32(4005)));
  while (got < 5005) {
    auto f = peer.read_frame(2s);
    REQUIRE(f);
    if (f->type == kData) got += f->payload.size();
  }
  CHECK(got == 5005);
  auto trailers = peer.read_until(kHeaders);
  REQUIRE(trailers);
  CHECK((trailers->flags & kEndStream) != 0);
}

TEST_CASE("h2 server: shutdown sends GOAWAY, lets the open call finish, then closes",
          "[h2][goaway]") {
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  RawPeer peer(server.port());
  handshake(peer);
  peer.write(frame(kHeaders, kEndHeaders, 1, grpc_request_block("/AgentService/Connect")));
  peer.write(frame(kData, 0, 1, grpc_frame("before")));
  auto echoed = peer.read_until(kData);
  REQUIRE(echoed);
  server.loop().run([&] {
    for (auto& c : server.connections()) c->shutdown();
    return 0;
  });
  auto goaway = peer.read_until(kGoaway);
  REQUIRE(goaway);
  CHECK(u32(goaway->payload, 0) == 1);  // last stream processed
  CHECK(u32(goaway->payload, 4) == 0);  // NO_ERROR
  // A new stream is ignored (RFC 9113 6.8); the open one still works to its end.
  peer.write(
      frame(kHeaders, kEndHeaders | kEndStream, 3, grpc_request_block("/AgentService/Connect")));
  peer.write(frame(kData, kEndStream, 1, grpc_frame("after")));
  bool answered3 = false, data_after = false, trailers = false;
  while (auto f = peer.read_frame(2s)) {
    if (f->stream_id == 3) answered3 = true;
    if (f->type == kData && f->stream_id == 1 && f->payload == grpc_frame("after"))
      data_after = true;
    if (f->type == kHeaders && f->stream_id == 1 && (f->flags & kEndStream) != 0) trailers = true;
  }
  CHECK_FALSE(answered3);
  CHECK(data_after);
  CHECK(trailers);
  // read_frame ended: the server closed the connection after the call.
  CHECK(has_reason(server, ""));
  REQUIRE(rec.wait(1));
  CHECK(rec.snapshot()[0].ok());
}

TEST_CASE("h2 server: a peer that leaves after its calls ended is logged at debug, one that "
          "leaves a call open at info",
          "[h2][bad-peer]") {
  // kube-apiserver opens a connection per tunnel and closes it when the tunnel ended: that end
  // is not worth a line per tunnel. A connection that goes with a call still open is.
  konn::testsupport::LogCapture captured("h2");
  auto closed_at = [&](spdlog::level::level_enum level) {
    return captured.has(level, " closed: ");
  };
  Recorder rec;
  H2Server server(Kind::Tcp, rec.handler());
  {
    RawPeer peer(server.port());
    handshake(peer);
  }
  // A raw peer's close finds the server's frames unread: EOF or a reset, both the peer's leaving.
  REQUIRE(eventually([&] { return server.close_reasons().size() == 1; }));
  CHECK(closed_at(spdlog::level::debug));
  CHECK_FALSE(closed_at(spdlog::level::info));
  {
    RawPeer peer(server.port());
    handshake(peer);
    peer.write(frame(kHeaders, kEndHeaders, 1, grpc_request_block("/AgentService/Connect")));
    peer.write(frame(kPing, 0, 0, "abcdefgh"));
    REQUIRE(peer.read_until(kPing));  // the call is open on the server
  }
  REQUIRE(rec.wait(1));
  CHECK(rec.snapshot()[0].code == 14);  // UNAVAILABLE: the connection closed under it
  CHECK(closed_at(spdlog::level::info));
}
