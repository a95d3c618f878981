// What one HTTP/2 connection writes, write by write: a transport that records each write lets the
// tests see which frames leave together (a peer's reads cannot tell: the kernel may merge writes).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <vector>

#include <asio/local/connect_pair.hpp>
#include <asio/steady_timer.hpp>
#include <catch2/catch.hpp>

#include "core/h2/connection.h"
#include "core/h2/grpc_framing.h"
#include "core/h2/h2_test_peer.h"
#include "core/h2/transport.h"

using namespace std::chrono_literals;
using namespace konn::core::h2;
using namespace konn::core::h2::testing;

namespace {

using Unix = asio::local::stream_protocol;

// A transport that keeps a copy of every write its inner transport is given.
class RecordingTransport final : public Transport {
 public:
  explicit RecordingTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  asio::any_io_executor executor() override { return inner_->executor(); }
  void async_handshake(bool server, std::function<void(std::error_code)> done) override {
    inner_->async_handshake(server, std::move(done));
  }
  void async_read(ReadHandler done) override { inner_->async_read(std::move(done)); }
  void async_write(asio::const_buffer buf, IoHandler done) override {
    {
      std::lock_guard lock(mu_);
      writes_.emplace_back(static_cast<const char*>(buf.data()), buf.size());
    }
    inner_->async_write(buf, std::move(done));
  }
  void close() override { inner_->close(); }
  bool is_tls() const override { return false; }

  std::vector<std::string> writes() {
    std::lock_guard lock(mu_);
    return writes_;
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::mutex mu_;
  std::vector<std::string> writes_;
};

bool is_frame(const FrameHead& f, uint8_t type, uint8_t flags) {
  return f.type == type && (f.flags & flags) == flags;
}

// Our Connection on one end of a socket pair (its writes recorded); the test thread writes raw
// bytes into the other end and drains what comes back.
struct OnPair {
  Loop loop;
  Unix::socket peer{loop.ctx()};
  RecordingTransport* recorder = nullptr;
  std::shared_ptr<Connection> conn;

  // A server whose calls `make_handler`'s handler answers (it gets the connection's io_context,
  // its thread).
  explicit OnPair(const std::function<Connection::CallHandler(asio::io_context&)>& make_handler) {
    auto handler = make_handler(loop.ctx());
    create(Connection::Role::Server, [&handler](Connection& c) {
      c.set_call_handler(std::move(handler));
      c.start();
    });
  }
  // A connection of `role`; `setup` runs on its thread once it is created, and starts it.
  OnPair(Connection::Role role, const std::function<void(Connection&)>& setup) {
    create(role, setup);
  }
  ~OnPair() {
    loop.run([&] {
      conn->close("test over");
      return 0;
    });
  }
  void write(const std::string& bytes) {
    const int fd = peer.native_handle();
    for (size_t off = 0; off < bytes.size();) {
      const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      REQUIRE(n > 0);
      off += static_cast<size_t>(n);
    }
  }
  void create(Connection::Role role, const std::function<void(Connection&)>& setup) {
    loop.run([&] {
      Unix::socket ours(loop.ctx());
      asio::local::connect_pair(ours, peer);
      auto rec =
          std::make_unique<RecordingTransport>(std::make_unique<UnixTransport>(std::move(ours)));
      recorder = rec.get();
      conn = Connection::create(role, std::move(rec), ConnectionOptions{});
      setup(*conn);
      return 0;
    });
  }
  // Reads and drops what our connection sent (so it never waits on a full socket).
  void drain() {
    char buf[4096];
    pollfd p{peer.native_handle(), POLLIN, 0};
    while (::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0) {
      if (::recv(peer.native_handle(), buf, sizeof(buf), MSG_DONTWAIT) <= 0) break;
    }
  }
  // Waits until a recorded write satisfies `pred`; its index, or nullopt after 5 s.
  template <typename Pred>
  std::optional<size_t> wait_write(Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
      drain();
      const auto ws = recorder->writes();
      for (size_t i = 0; i < ws.size(); ++i) {
        if (pred(frames_of(ws[i]))) return i;
      }
      std::this_thread::sleep_for(2ms);
    }
    return std::nullopt;
  }
};

std::string client_preface() {
  return std::string(kPreface) + frame(kSettings, 0, 0, "") + frame(kSettings, kAck, 0, "");
}

std::string grpc_message_frame(uint32_t stream_id, const std::string& payload) {
  return frame(kData, 0, stream_id, grpc_frame(payload));
}

bool has_trailers(const std::vector<FrameHead>& fs) {
  for (const auto& f : fs) {
    if (is_frame(f, kHeaders, kEndStream | kEndHeaders)) return true;
  }
  return false;
}

// A handler that answers the first message with "bye" and the OK status, queued under a
// WriteHold when `hold`. Queued from a handler of its own, as a server does when the answer comes
// from elsewhere (the agent): what is queued while the connection reads leaves after the read.
Connection::CallHandler last_message_then_status(asio::io_context& ctx, bool hold) {
  return [&ctx, hold](const std::shared_ptr<Stream>& s, const CallInfo&) {
    std::weak_ptr<Stream> w = s;
    StreamCallbacks cb;
    cb.on_message = [&ctx, w, hold](std::string&&) {
      // Later, once the connection's writes of this read (SETTINGS ACK, ...) completed.
      auto timer = std::make_shared<asio::steady_timer>(ctx, 50ms);
      timer->async_wait([timer, w, hold](std::error_code) {
        auto live = w.lock();
        if (!live) return;
        std::optional<WriteHold> held;
        if (hold) held.emplace(live->hold_writes());
        live->send_message("bye");
        live->finish({});
      });
    };
    s->set_callbacks(std::move(cb));
  };
}

}  // namespace

TEST_CASE("h2 server: its SETTINGS wait for the client's preface and leave with their ACK",
          "[h2][writes]") {
  OnPair s(
      [](asio::io_context&) { return [](const std::shared_ptr<Stream>&, const CallInfo&) {}; });
  // A client speaks first: until it does, the server writes nothing.
  std::this_thread::sleep_for(50ms);
  CHECK(s.recorder->writes().empty());
  s.write(std::string(kPreface) + frame(kSettings, 0, 0, ""));
  auto first = s.wait_write([](const std::vector<FrameHead>& fs) { return !fs.empty(); });
  REQUIRE(first);
  CHECK(*first == 0);
  const auto fs = frames_of(s.recorder->writes()[0]);
  REQUIRE(fs.size() >= 2);
  CHECK(is_frame(fs[0], kSettings, 0));
  CHECK((fs[0].flags & kAck) == 0);
  CHECK(is_frame(fs[1], kSettings, kAck));
}

TEST_CASE("h2 server: a last message and the status queued under a WriteHold leave in one write",
          "[h2][writes]") {
  for (const bool hold : {true, false}) {
    CAPTURE(hold);
    OnPair s([hold](asio::io_context& ctx) { return last_message_then_status(ctx, hold); });
    s.write(client_preface() +
            frame(kHeaders, kEndHeaders, 1, grpc_request_block("/AgentService/Connect")) +
            grpc_message_frame(1, "hello"));
    auto with_trailers = s.wait_write(has_trailers);
    REQUIRE(with_trailers);
    const auto ws = s.recorder->writes();
    const auto fs = frames_of(ws[*with_trailers]);
    bool data_before_trailers = false;
    for (const auto& f : fs) {
      if (is_frame(f, kHeaders, kEndStream | kEndHeaders)) break;
      if (f.type == kData && f.stream_id == 1) data_before_trailers = true;
    }
    // Held, "bye" and the status share one write; otherwise the status waits for the write
    // that carries "bye", and goes in the next.
    CHECK(data_before_trailers == hold);
  }
}

TEST_CASE("h2: an idle connection keeps no write buffer from its last burst", "[h2][writes]") {
  OnPair s([](asio::io_context&) {
    return [](const std::shared_ptr<Stream>& st, const CallInfo&) {
      std::weak_ptr<Stream> w = st;
      StreamCallbacks cb;
      cb.on_message = [w](std::string&&) {
        if (auto live = w.lock()) live->send_message(std::string(1024 * 1024, 'x'));
      };
      st->set_callbacks(std::move(cb));
    };
  });
  s.write(client_preface() +
          frame(kHeaders, kEndHeaders, 1, grpc_request_block("/AgentService/Connect")) +
          grpc_message_frame(1, "send me a MiB"));
  // The client's windows (64 KiB) let the first part go; a larger buffer was needed for it.
  REQUIRE(s.wait_write([](const std::vector<FrameHead>& fs) {
    for (const auto& f : fs) {
      if (f.type == kData) return true;
    }
    return false;
  }));
  // Every write completed and nothing more may go (the windows are spent): idle.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  size_t held = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    s.drain();
    held = s.loop.run([&] { return s.conn->write_buffer_capacity(); });
    if (held <= 4096) break;
    std::this_thread::sleep_for(5ms);
  }
  CHECK(held <= 4096);
}

TEST_CASE(
    "h2 client: a call half-closed in reaction to the server's last message ends with "
    "END_STREAM, not a reset",
    "[h2][writes]") {
  // The proxy-server sends a tunnel's CLOSE_RSP and the call's status in one write; the client
  // half-closes when it reads CLOSE_RSP. Its END_STREAM is not yet written when the status
  // arrives: a reset instead would count towards the server's rapid-reset limit.
  for (const bool half_close : {true, false}) {
    CAPTURE(half_close);
    std::shared_ptr<Stream> stream;
    OnPair c(Connection::Role::Client, [&stream, half_close](Connection& conn) {
      conn.start();
      StreamCallbacks cb;
      cb.on_message = [&stream, half_close](std::string&&) {
        if (half_close) stream->half_close();
      };
      stream = conn.start_call("/ProxyService/Proxy", {}, std::move(cb));
      stream->send_message("dial");
    });
    const std::string response_block =
        hpack_literal(":status", "200") + hpack_literal("content-type", "application/grpc");
    const std::string trailers_block = hpack_literal("grpc-status", "0");
    c.write(frame(kSettings, 0, 0, "") + frame(kSettings, kAck, 0, "") +
            frame(kHeaders, kEndHeaders, 1, response_block) +
            frame(kData, 0, 1, grpc_frame("closed")) +
            frame(kHeaders, kEndHeaders | kEndStream, 1, trailers_block));
    // What the client wrote for stream 1 after the request: END_STREAM, or RST_STREAM.
    auto on_stream_1 = [](uint8_t type, uint8_t flags) {
      return [type, flags](const std::vector<FrameHead>& fs) {
        return std::any_of(fs.begin(), fs.end(), [&](const FrameHead& f) {
          return f.stream_id == 1 && is_frame(f, type, flags);
        });
      };
    };
    auto end_stream_frame = on_stream_1(kData, kEndStream);
    auto reset_frame = on_stream_1(kRstStream, 0);
    c.wait_write(
        [&](const std::vector<FrameHead>& fs) { return end_stream_frame(fs) || reset_frame(fs); });
    auto written = [&c](const auto& pred) {
      const auto ws = c.recorder->writes();
      return std::any_of(ws.begin(), ws.end(),
                         [&](const std::string& w) { return pred(frames_of(w)); });
    };
    const bool end_stream = written(end_stream_frame);
    const bool reset = written(reset_frame);
    CHECK(end_stream == half_close);
    CHECK(reset == !half_close);
    c.loop.run([&] {
      stream.reset();
      return 0;
    });
  }
}
