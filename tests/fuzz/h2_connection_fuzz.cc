// HTTP/2 as core/h2's Connection reads it from a peer, in either role: the bytes a kube-apiserver
// or an agent (server role) or a proxy-server (client role) may send, against the calls the
// application makes meanwhile. The connection runs over an in-memory transport on an io_context
// this target polls, so one input is one deterministic run with no socket and no thread.
//
// Input: [options byte] then operations, each an op byte and its arguments (FuzzInput). The
// options byte picks the role, small or default windows and message limit, and PING policing;
// unless its top bit is set the peer's preface (server role) or SETTINGS (client role) is sent
// first, so mutations spend their time past the handshake. Inbound operations queue bytes (raw,
// or frames built from arguments: gRPC request and response header blocks in HPACK, gRPC
// messages with true or lying lengths, SETTINGS, PING, WINDOW_UPDATE, RST_STREAM, GOAWAY); a
// deliver operation hands the queue to the connection in pieces of a chosen size. Application
// operations act on a call (send, finish, abort, cancel, pause, resume, half-close, start a call,
// shut down). The peer may stop reading (writes are held) or go away.
//
// Checks beyond "no crash, no sanitizer report":
// - the transport sees at most one read and one write at a time, and none after close;
// - what the connection writes is its preface (client role), then whole HTTP/2 frames of at most
//   16 KiB (the default SETTINGS_MAX_FRAME_SIZE, which this library never raises), each write
//   ending on a frame boundary; no PUSH_PROMISE;
// - each call's callbacks keep their order: headers (client) before messages, no message after
//   the half-close, exactly one on_end and nothing after it; no message over the limit;
// - after the input the connection is closed: every call has ended, on_close ran once, and once
//   the application lets go, the Connection and every Stream are freed (no reference cycle).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <asio/error.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include "core/h2/connection.h"
#include "core/h2/grpc_framing.h"
#include "core/h2/h2_test_peer.h"
#include "core/h2/transport.h"
#include "core/log/logger.h"
#include "tests/fuzz/fuzz_input.h"

namespace h2 = konn::core::h2;
using konn::core::h2::testing::be32;
using konn::core::h2::testing::frame;
using konn::core::h2::testing::hpack_literal;
using konn::fuzz::FuzzInput;

namespace {

constexpr size_t kFrameHeader = 9;
constexpr size_t kDefaultMaxFrame = 16384;
constexpr std::string_view kClientPreface = h2::testing::kPreface;

// The byte stream under the connection: reads are answered by the harness, writes are recorded
// and completed by it (or held, for a peer that stopped reading).
class MemoryTransport final : public h2::Transport {
 public:
  explicit MemoryTransport(asio::io_context& ctx) : ctx_(ctx) {}
  asio::any_io_executor executor() override { return ctx_.get_executor(); }
  void async_handshake(bool /*server*/, std::function<void(std::error_code)> done) override {
    asio::post(ctx_, [done = std::move(done)] { done({}); });
  }
  void async_read(ReadHandler done) override {
    KONN_FUZZ_CHECK(!closed_);
    KONN_FUZZ_CHECK(!read_);
    read_ = std::move(done);
  }
  void async_write(asio::const_buffer buf, IoHandler done) override {
    KONN_FUZZ_CHECK(!closed_);
    KONN_FUZZ_CHECK(!write_);
    KONN_FUZZ_CHECK(buf.size() > 0);
    write_size_ = buf.size();
    write_ = std::move(done);
    check_frames(std::string_view(static_cast<const char*>(buf.data()), buf.size()));
  }
  void close() override {
    KONN_FUZZ_CHECK(!closed_);
    closed_ = true;
    if (auto r = std::exchange(read_, nullptr)) {
      asio::post(ctx_, [r = std::move(r)] { r(asio::error::operation_aborted, {}); });
    }
    if (auto w = std::exchange(write_, nullptr)) {
      asio::post(ctx_, [w = std::move(w)] { w(asio::error::operation_aborted, 0); });
    }
  }
  bool is_tls() const override { return false; }

  // Harness side. Each returns whether it did something.
  bool deliver(std::string_view bytes) {
    if (!read_ || bytes.empty()) return false;
    auto r = std::exchange(read_, nullptr);
    r({}, bytes);
    return true;
  }
  bool fail_read(std::error_code ec) {
    if (!read_) return false;
    auto r = std::exchange(read_, nullptr);
    r(ec, {});
    return true;
  }
  bool complete_write(std::error_code ec = {}) {
    if (!write_) return false;
    auto w = std::exchange(write_, nullptr);
    w(ec, ec ? 0 : write_size_);
    return true;
  }
  bool reading() const { return static_cast<bool>(read_); }

  void set_role(h2::Connection::Role role) { client_ = role == h2::Connection::Role::Client; }

 private:
  // Parses one write: the preface first of all (client role), then whole frames.
  void check_frames(std::string_view rest) {
    if (!preface_checked_) {
      preface_checked_ = true;
      if (client_) {
        KONN_FUZZ_CHECK(rest.substr(0, kClientPreface.size()) == kClientPreface);
        rest.remove_prefix(kClientPreface.size());
      }
    }
    size_t whole = 0;
    for (const auto& f : h2::testing::frames_of(rest)) {
      KONN_FUZZ_CHECK(f.length <= kDefaultMaxFrame);
      if (frames_ == 0) KONN_FUZZ_CHECK(f.type == 0x4);  // SETTINGS comes first
      KONN_FUZZ_CHECK(f.type != 0x5);                    // never PUSH_PROMISE
      ++frames_;
      whole += kFrameHeader + f.length;
    }
    KONN_FUZZ_CHECK(whole == rest.size());  // a write ends on a frame boundary
  }

  asio::io_context& ctx_;
  ReadHandler read_;
  IoHandler write_;
  size_t write_size_ = 0;
  bool closed_ = false;
  bool client_ = false;
  bool preface_checked_ = false;
  size_t frames_ = 0;
};

// --- Frames the peer sends -------------------------------------------------------------------

// Stream ids: mostly the odd ones a client opens, sometimes 0 or an even one.
uint32_t stream_id(FuzzInput& in) {
  const uint8_t b = in.byte();
  if (b & 0x80) return b & 0x0f;
  return 2u * (b & 0x0f) + 1;
}

std::string pick(FuzzInput& in, std::initializer_list<std::string_view> options) {
  const unsigned i = in.pick(static_cast<unsigned>(options.size()));
  return std::string(*(options.begin() + i));
}

// Custom metadata: names from a short list (one uppercase, one empty, one reserved prefix),
// values from the input or, now and then, one over the 64 KiB block limit.
void metadata_fields(FuzzInput& in, std::string& block) {
  const unsigned n = in.pick(3);
  for (unsigned i = 0; i < n; ++i) {
    const std::string name = pick(in, {"x-a", "agentid", "serverid", "Upper", "", "grpc-x"});
    std::string value = in.bytes();
    if (in.byte() == 0xff) value.assign(70000, 'v');
    block += hpack_literal(name, value);
  }
}

// A request header block (server role). Each pseudo header may be left out or wrong.
std::string request_block(FuzzInput& in) {
  const uint8_t drop = in.byte();
  std::string b;
  if (!(drop & 1)) b += hpack_literal(":method", pick(in, {"POST", "POST", "GET"}));
  if (!(drop & 2)) b += hpack_literal(":scheme", "http");
  if (!(drop & 4)) {
    b += hpack_literal(":path",
                       pick(in, {"/AgentService/Connect", "/ProxyService/Proxy", "/x/Y", "", "*"}));
  }
  if (!(drop & 8)) b += hpack_literal(":authority", "localhost");
  if (!(drop & 16)) {
    b += hpack_literal("content-type", pick(in, {"application/grpc", "application/grpc+proto",
                                                 "text/plain", "application/grpcx"}));
  }
  if (!(drop & 32)) b += hpack_literal("te", pick(in, {"trailers", "trailers", "gzip"}));
  if (drop & 64) {
    b += hpack_literal("grpc-timeout", pick(in, {"100S", "99999999H", "bad", "", "1000000000m"}));
  }
  if (drop & 128) b += hpack_literal("grpc-encoding", pick(in, {"gzip", "identity"}));
  metadata_fields(in, b);
  return b;
}

// A response or trailer block (client role).
std::string response_block(FuzzInput& in, bool trailers) {
  const uint8_t bits = in.byte();
  std::string b;
  if (!trailers || (bits & 1))
    b += hpack_literal(":status", pick(in, {"200", "200", "404", "503", "x"}));
  if (!trailers && !(bits & 2)) {
    b += hpack_literal("content-type", pick(in, {"application/grpc", "text/html"}));
  }
  if (trailers || (bits & 4)) {
    if (!(bits & 8))
      b += hpack_literal("grpc-status", pick(in, {"0", "1", "13", "14", "abc", "99"}));
    if (bits & 16) b += hpack_literal("grpc-message", in.bytes());
  }
  metadata_fields(in, b);
  return b;
}

// A HEADERS frame carrying `block`, split into CONTINUATIONs when asked or when it is large.
std::string headers_frames(FuzzInput& in, uint32_t sid, const std::string& block) {
  const uint8_t bits = in.byte();
  const uint8_t end_stream = (bits & 1) ? 0x1 : 0;
  const size_t piece = (bits & 2) ? 1 + in.byte() : kDefaultMaxFrame;
  std::string out;
  size_t off = 0;
  bool first = true;
  do {
    const size_t n = std::min(piece, block.size() - off);
    // Bit 2 ends the block after its second frame, whatever is left (a truncated block).
    const bool last = off + n == block.size() || ((bits & 4) != 0 && !first);
    const uint8_t flags = (first ? end_stream : 0) | (last ? 0x4 : 0);
    out += frame(first ? 0x1 : 0x9, flags, sid, std::string_view(block).substr(off, n));
    off += n;
    first = false;
    if (last) break;
  } while (off < block.size());
  return out;
}

// One DATA frame with gRPC messages (length prefixes true, or lying), maybe padded.
std::string data_frame(FuzzInput& in, uint32_t sid) {
  const uint8_t bits = in.byte();
  std::string payload;
  const unsigned messages = 1 + (bits & 3);
  for (unsigned i = 0; i < messages; ++i) {
    std::string m = in.bytes();
    if (bits & 0x40) m.append(size_t{in.byte()} * 512, 'm');  // up to 127 KiB
    uint32_t len = static_cast<uint32_t>(m.size());
    if (bits & 0x10) len = in.u16();                 // a prefix that lies
    if (bits & 0x80) len = 0x7fffffff;               // over every limit
    payload.push_back((bits & 0x20) ? '\1' : '\0');  // compressed flag
    payload += be32(len);
    payload += m;
  }
  uint8_t flags = (bits & 4) ? 0x1 : 0;  // END_STREAM
  std::string frames;
  // Larger than a frame: split, the flags on the last.
  for (size_t off = 0; off < payload.size(); off += kDefaultMaxFrame) {
    const bool last = off + kDefaultMaxFrame >= payload.size();
    std::string piece = payload.substr(off, kDefaultMaxFrame);
    uint8_t f = last ? flags : 0;
    if (last && (bits & 8) && piece.size() + 1 + 3 <= kDefaultMaxFrame) {
      f |= 0x8;  // PADDED
      piece.insert(piece.begin(), '\3');
      piece.append(3, '\0');
    }
    frames += frame(0x0, f, sid, piece);
    if (last) break;
  }
  return frames;
}

std::string settings_frame(FuzzInput& in) {
  if (in.flag()) return frame(0x4, 0x1, 0, "");  // ACK
  std::string p;
  const unsigned n = in.pick(4);
  for (unsigned i = 0; i < n; ++i) {
    const uint16_t id = static_cast<uint16_t>(1 + in.pick(7));
    p.push_back(static_cast<char>(id >> 8));
    p.push_back(static_cast<char>(id & 0xff));
    uint32_t v = in.u16();
    if (in.flag()) v <<= 8;
    p += be32(v);
  }
  return frame(0x4, 0, 0, p);
}

// --- The application ------------------------------------------------------------------------

// One call as the application sees it, with the order of its callbacks checked.
struct Call {
  std::shared_ptr<h2::Stream> stream;
  bool headers = false;
  size_t messages = 0;
  bool half_closed = false;
  int ends = 0;
};

const std::string& borrowed_tail() {
  static const std::string tail(40000, 'b');  // lives for the process: safe to lend
  return tail;
}

class Harness {
 public:
  Harness(h2::Connection::Role role, h2::ConnectionOptions options) : role_(role) {
    max_message_ = options.max_message_bytes;
    auto t = std::make_unique<MemoryTransport>(ctx_);
    t->set_role(role);
    transport_ = t.get();
    conn_ = h2::Connection::create(role, std::move(t), std::move(options));
    conn_->set_on_close([this](const std::string&) { ++closes_; });
    conn_->set_call_handler([this](const std::shared_ptr<h2::Stream>& s, const h2::CallInfo& info) {
      KONN_FUZZ_CHECK(role_ == h2::Connection::Role::Server);
      if (reject_unknown_ && info.path != "/AgentService/Connect" &&
          info.path != "/ProxyService/Proxy") {
        s->finish({h2::grpc_code::kUnimplemented, "unknown method"});
        return;
      }
      adopt(s);
    });
  }

  void set_reject_unknown(bool v) { reject_unknown_ = v; }
  MemoryTransport& transport() { return *transport_; }
  h2::Connection& conn() { return *conn_; }
  std::vector<std::shared_ptr<Call>>& calls() { return calls_; }
  void set_stalled(bool v) { stalled_ = v; }
  bool stalled() const { return stalled_; }

  void start() {
    conn_->start();
    settle();
  }

  // Runs what is ready, completing writes unless the peer stalls, until nothing moves.
  void settle() {
    for (int i = 0; i < 10000; ++i) {
      const size_t ran = ctx_.poll();
      ctx_.restart();
      const bool wrote = !stalled_ && transport_->complete_write();
      if (ran == 0 && !wrote) return;
    }
  }

  void deliver(std::string_view bytes, size_t piece) {
    while (!bytes.empty() && transport_->reading()) {
      const size_t n = piece == 0 ? bytes.size() : std::min(piece, bytes.size());
      transport_->deliver(bytes.substr(0, n));
      bytes.remove_prefix(n);
      settle();
    }
  }

  void adopt(const std::shared_ptr<h2::Stream>& s) {
    auto call = std::make_shared<Call>();
    call->stream = s;
    Call* c = call.get();
    const bool client = role_ == h2::Connection::Role::Client;
    h2::StreamCallbacks cb;
    cb.on_headers = [c, client](const h2::Metadata&) {
      KONN_FUZZ_CHECK(client);
      KONN_FUZZ_CHECK(!c->headers && c->messages == 0 && c->ends == 0);
      c->headers = true;
    };
    cb.on_message = [this, c, client](std::string&& m) {
      KONN_FUZZ_CHECK(c->ends == 0 && !c->half_closed);
      KONN_FUZZ_CHECK(!client || c->headers);
      KONN_FUZZ_CHECK(m.size() <= max_message_);
      ++c->messages;
    };
    cb.on_half_close = [c, client] {
      KONN_FUZZ_CHECK(!client);
      KONN_FUZZ_CHECK(c->ends == 0 && !c->half_closed);
      c->half_closed = true;
    };
    cb.on_end = [c](const h2::GrpcStatus&, const h2::Metadata&) {
      KONN_FUZZ_CHECK(c->ends == 0);
      ++c->ends;
    };
    s->set_callbacks(std::move(cb));
    calls_.push_back(std::move(call));
  }

  // Closes the connection and checks that everything ended and nothing is left holding it.
  void finish() {
    settle();
    conn_->close("fuzz input ended");
    settle();
    KONN_FUZZ_CHECK(conn_->closed());
    KONN_FUZZ_CHECK(conn_->open_streams() == 0);
    KONN_FUZZ_CHECK(closes_ == 1);
    std::vector<std::weak_ptr<h2::Stream>> streams;
    for (auto& c : calls_) {
      KONN_FUZZ_CHECK(c->ends == 1);
      streams.push_back(c->stream);
    }
    std::weak_ptr<h2::Connection> weak = conn_;
    calls_.clear();
    conn_.reset();
    transport_ = nullptr;
    ctx_.poll();  // handlers that still held the connection run and let go
    KONN_FUZZ_CHECK(weak.expired());
    for (auto& s : streams) KONN_FUZZ_CHECK(s.expired());
  }

 private:
  asio::io_context ctx_;
  h2::Connection::Role role_;
  size_t max_message_ = 0;
  MemoryTransport* transport_ = nullptr;
  std::shared_ptr<h2::Connection> conn_;
  std::vector<std::shared_ptr<Call>> calls_;
  bool stalled_ = false;
  bool reject_unknown_ = false;
  int closes_ = 0;
};

void app_action(Harness& h, FuzzInput& in) {
  const unsigned action = in.pick(13);
  const bool client = h.conn().role() == h2::Connection::Role::Client;
  if (action == 11) {  // a new call (client role)
    if (!client) return;
    h2::Metadata md;
    if (in.flag()) md.emplace_back("agentid", in.bytes());
    std::optional<std::chrono::milliseconds> timeout;
    if (in.flag()) timeout = std::chrono::milliseconds(3600 * 1000);
    auto s = h.conn().start_call(pick(in, {"/AgentService/Connect", "/ProxyService/Proxy"}), md, {},
                                 timeout);
    if (s) h.adopt(s);
    return;
  }
  if (action == 12) {
    h.conn().shutdown();
    return;
  }
  if (h.calls().empty()) return;
  Call& c = *h.calls()[in.pick(static_cast<unsigned>(h.calls().size()))];
  h2::Stream& s = *c.stream;
  switch (action) {
    case 0: {
      std::string m = in.bytes();
      m.append(size_t{in.byte()} * 256, 'p');  // up to 64 KiB: past small windows
      s.send_message(m);
      break;
    }
    case 1: {
      std::string framed(h2::kGrpcPrefixBytes, '\0');
      framed += in.bytes();
      const size_t n = size_t{in.byte()} * 128;
      s.send_framed(std::move(framed), std::string_view(borrowed_tail()).substr(0, n));
      break;
    }
    case 2: {
      h2::Metadata trailers;
      if (in.flag()) trailers.emplace_back("x-t", in.bytes());
      s.finish({static_cast<int>(in.pick(17)), in.bytes()}, trailers);
      break;
    }
    case 3:
      s.abort({h2::grpc_code::kUnavailable, "aborted"});
      break;
    case 4:
      s.cancel();
      break;
    case 5:
      s.pause_reading();
      break;
    case 6:
      s.resume_reading();
      break;
    case 7:
      s.half_close();
      break;
    case 8:
      s.send_headers({{"x-h", in.bytes()}});
      break;
    case 9: {  // a last message and the status in one write
      auto hold = s.hold_writes();
      s.send_message(in.bytes());
      s.finish({h2::grpc_code::kOk, ""});
      break;
    }
    default:  // 10: the call is dropped by the application (the connection keeps its stream)
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const char* level = std::getenv("KONN_FUZZ_LOG_LEVEL");  // e.g. debug, to see a finding
  konn::core::log::set_level(level != nullptr ? level : "off");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t opt = in.byte();
  const auto role = (opt & 1) ? h2::Connection::Role::Client : h2::Connection::Role::Server;
  h2::ConnectionOptions options;
  if (opt & 2) {  // small windows and limits: flow control and refusals early
    options.stream_window = 1024;
    options.connection_window = 4096;
    options.max_message_bytes = 2048;
    options.max_concurrent_streams = 3;
  }
  if (opt & 4) {
    options.min_peer_ping_interval = std::chrono::hours(1);
    options.peer_pings_without_calls = (opt & 8) != 0;
  }
  Harness h(role, options);
  h.set_reject_unknown((opt & 16) != 0);
  h.start();

  std::string queued;
  if (!(opt & 0x80)) {
    queued = role == h2::Connection::Role::Server ? std::string(kClientPreface) : std::string();
    queued += frame(0x4, 0, 0, "");
  }
  const bool client = role == h2::Connection::Role::Client;
  // A client's first call, so that a server's answers have somewhere to go.
  if (client && !(opt & 0x40)) {
    if (auto s = h.conn().start_call("/AgentService/Connect", {}, {})) h.adopt(s);
    h.settle();
  }

  while (!in.empty()) {
    switch (in.pick(16)) {
      case 0:  // raw bytes
        queued += in.bytes();
        break;
      case 1: {  // any frame
        const uint8_t type = static_cast<uint8_t>(in.pick(11));
        const uint8_t flags = in.byte();
        const uint32_t sid = stream_id(in);
        queued += frame(type, flags, sid, in.bytes());
        break;
      }
      case 2: {  // headers
        const uint32_t sid = stream_id(in);
        const std::string block = client ? response_block(in, in.flag()) : request_block(in);
        queued += headers_frames(in, sid, block);
        break;
      }
      case 3: {
        const uint32_t sid = stream_id(in);
        queued += data_frame(in, sid);
        break;
      }
      case 4:
        queued += settings_frame(in);
        break;
      case 5: {  // PING
        std::string p = in.bytes(8);
        p.resize(8, '\0');
        queued += frame(0x6, in.flag() ? 0x1 : 0, 0, p);
        break;
      }
      case 6: {  // WINDOW_UPDATE
        const uint32_t sid = in.flag() ? 0 : stream_id(in);
        uint32_t inc = in.u16();
        if (in.flag()) inc = 0x7fffffff;
        queued += frame(0x8, 0, sid, be32(inc));
        break;
      }
      case 7: {  // RST_STREAM
        const uint32_t sid = stream_id(in);
        queued += frame(0x3, 0, sid, be32(in.pick(14)));
        break;
      }
      case 8: {  // GOAWAY
        std::string p = be32(in.byte());
        p += be32(in.pick(14));
        queued += frame(0x7, 0, 0, p);
        break;
      }
      case 9:
      case 10: {  // deliver what is queued, whole or in pieces
        const size_t piece = in.byte();
        h.deliver(queued, piece);
        queued.clear();
        break;
      }
      case 11:
      case 12:
        app_action(h, in);
        h.settle();
        break;
      case 13:  // the peer stops reading, or reads again
        h.set_stalled(!h.stalled());
        h.settle();
        break;
      case 14:  // the peer goes away
        h.deliver(queued, 0);
        queued.clear();
        h.transport().fail_read(in.flag() ? std::error_code(asio::error::eof)
                                          : std::error_code(asio::error::connection_reset));
        h.settle();
        break;
      default:  // a write fails
        if (h.transport().complete_write(asio::error::broken_pipe)) h.settle();
        break;
    }
  }
  h.deliver(queued, 0);
  h.finish();
  return 0;
}
