#pragma once

// Test helpers for core/h2: an io_context thread, a server of Connections on TCP/unix/TLS, a
// client Connection, and raw HTTP/2 frames for misbehaving peers.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/ssl.hpp>

#include "core/h2/connection.h"
#include "konnectivity/client.pb.h"

struct nghttp2_hd_inflater;

namespace konn::core::h2::testing {

// One io_context run by one thread: the connections' thread.
class Loop {
 public:
  Loop() : work_(ctx_.get_executor()), thread_([this] { ctx_.run(); }) {}
  ~Loop() {
    work_.reset();
    ctx_.stop();
    thread_.join();
  }
  asio::io_context& ctx() { return ctx_; }
  // Runs `f` on the loop and waits for its result.
  template <typename F>
  auto run(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto fut = task.get_future();
    asio::post(ctx_, [&task] { task(); });
    return fut.get();
  }

 private:
  asio::io_context ctx_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
};

enum class Kind { Tcp, Unix, Tls };

// Our server role: accepts connections and gives each a Connection with `handler`.
class H2Server {
 public:
  H2Server(Kind kind, Connection::CallHandler handler, ConnectionOptions options = {},
           const std::string& unix_path = {});
  ~H2Server();
  // For grpc::CreateChannel: "127.0.0.1:port" or "unix:path".
  std::string target() const;
  uint16_t port() const { return port_; }
  const std::string& unix_path() const { return unix_path_; }
  Loop& loop() { return loop_; }
  // Reasons the connections closed with, so far.
  std::vector<std::string> close_reasons();
  size_t accepted() const { return accepted_; }
  // The connections accepted so far (use on the loop).
  std::vector<std::shared_ptr<Connection>> connections();

 private:
  void accept();
  void add(std::unique_ptr<Transport> t);

  Kind kind_;
  Connection::CallHandler handler_;
  ConnectionOptions options_;
  std::string unix_path_;
  uint16_t port_ = 0;
  Loop loop_;
  std::unique_ptr<asio::ssl::context> tls_;
  std::optional<asio::ip::tcp::acceptor> tcp_;
  std::optional<asio::local::stream_protocol::acceptor> unix_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Connection>> conns_;
  std::vector<std::string> reasons_;
  std::atomic<size_t> accepted_{0};
};

// Our client role, connected to `target` ("127.0.0.1:port" or a unix path) on `loop`.
std::shared_ptr<Connection> connect_client(Loop& loop, Kind kind, const std::string& target,
                                           ConnectionOptions options = {});

// The outcome of one call made with our client.
struct CallResult {
  std::vector<std::string> messages;
  Metadata headers;
  GrpcStatus status;
  Metadata trailers;
};

// A call driven from the test thread: messages sent on the loop, results collected.
class ClientCall {
 public:
  ClientCall(Loop& loop, const std::shared_ptr<Connection>& conn, const std::string& path,
             const Metadata& md, std::optional<std::chrono::milliseconds> timeout = {});
  // Drops the callbacks, so a stream outliving the call reports nowhere.
  ~ClientCall();
  ClientCall(const ClientCall&) = delete;
  ClientCall& operator=(const ClientCall&) = delete;
  bool started() const { return stream_ != nullptr; }
  void send(const std::string& m);
  // Stream::send_framed(head, borrowed): `borrowed` must live until the call ends.
  void send_framed(std::string head, std::string_view borrowed);
  void half_close();
  void cancel();
  // Waits until `n` messages arrived (false after `timeout`).
  bool wait_messages(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Waits for on_end (nullopt after `timeout`).
  std::optional<CallResult> wait_end(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  std::vector<std::string> messages();

 private:
  Loop& loop_;
  std::shared_ptr<Stream> stream_;
  std::mutex mu_;
  std::condition_variable cv_;
  CallResult result_;
  bool ended_ = false;
};

// A Konnectivity DATA packet for tunnel `connect_id`.
Packet data_packet(int64_t connect_id, const std::string& bytes);

// Raw HTTP/2 bytes for peers that misbehave.
// Frame types and flags (RFC 9113, section 6).
inline constexpr uint8_t kData = 0, kHeaders = 1, kRstStream = 3, kSettings = 4, kPing = 6,
                         kGoaway = 7, kWindowUpdate = 8;
inline constexpr uint8_t kEndStream = 1, kEndHeaders = 4, kAck = 1;
std::string frame(uint8_t type, uint8_t flags, uint32_t stream_id, std::string_view payload);
std::string frame_header(uint8_t type, uint8_t flags, uint32_t stream_id, uint32_t length);
inline constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
// HPACK: a literal header without indexing, new name, no Huffman.
std::string hpack_literal(std::string_view name, std::string_view value);
// A valid gRPC request header block for `path` (HPACK, no Huffman), with `authority`.
std::string grpc_request_block(const std::string& path, std::string_view authority = "localhost");
// A 32-bit field in network order (an error code, a window increment, a stream id).
std::string be32(uint32_t v);

// The 9-byte head of one frame.
struct FrameHead {
  uint8_t type;
  uint8_t flags;
  uint32_t stream_id;
  size_t length;
};
// The frames of one write, in order; a last frame cut short is listed with its whole length (so
// the lengths add up to more than the write).
std::vector<FrameHead> frames_of(std::string_view w);

// A frame read off a raw socket.
struct RawFrame {
  uint8_t type = 0;
  uint8_t flags = 0;
  uint32_t stream_id = 0;
  std::string payload;
};

// A blocking raw TCP peer (test thread).
class RawPeer {
 public:
  explicit RawPeer(uint16_t port);
  explicit RawPeer(asio::ip::tcp::socket s);
  void write(const std::string& bytes);
  // The next frame, or nullopt at EOF / error / timeout.
  std::optional<RawFrame> read_frame(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Reads frames until one of `type` arrives (nullopt at EOF).
  std::optional<RawFrame> read_until(uint8_t type,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // True when the peer closed the connection (reads EOF) within `timeout`, skipping frames.
  bool wait_eof(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  asio::ip::tcp::socket& socket() { return socket_; }
  // The header fields of a HEADERS frame (no CONTINUATION), decoded with this connection's HPACK
  // state: call it for every HEADERS frame read, in order.
  Metadata decode_headers(const RawFrame& f);
  ~RawPeer();
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

 private:
  nghttp2_hd_inflater* inflater_ = nullptr;
  bool read_exact(char* p, size_t n, std::chrono::milliseconds timeout);
  asio::io_context ctx_;
  asio::ip::tcp::socket socket_;
};

}  // namespace konn::core::h2::testing
