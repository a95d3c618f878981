#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

#include "core/h2/grpc_framing.h"
#include "core/h2/grpc_status.h"
#include "core/h2/idle_free_queue.h"
#include "core/h2/header_check.h"
#include "core/h2/transport.h"

struct nghttp2_session;

namespace konn::core::h2 {

// Custom metadata (lowercase keys, no pseudo-headers, no reserved gRPC/HTTP keys), in order.
using Metadata = std::vector<std::pair<std::string, std::string>>;

// The first value of `key`, or nullopt.
std::optional<std::string> find_metadata(const Metadata& md, std::string_view key);

// Callbacks of one stream, all run on the connection's thread. Each may be empty.
struct StreamCallbacks {
  // Client role: the response headers' custom metadata (not called for a trailers-only answer).
  std::function<void(const Metadata&)> on_headers;
  // One whole message from the peer, in order, while reading is not paused.
  std::function<void(std::string&&)> on_message;
  // The peer sent everything it will send (END_STREAM), after its last on_message. Server role
  // only: a client stream ends with on_end.
  std::function<void()> on_half_close;
  // Once per stream, last: the call's status (client: the peer's grpc-status, or what went wrong;
  // server: the status sent, or CANCELLED/UNAVAILABLE when the peer reset or the connection
  // ended) and trailing metadata (client role).
  std::function<void(const GrpcStatus&, const Metadata& trailers)> on_end;
};

class Connection;

// Holds a connection's writes back while it lives (see Stream::hold_writes). Movable only.
class WriteHold {
 public:
  WriteHold() = default;
  explicit WriteHold(std::shared_ptr<Connection> conn);
  WriteHold(WriteHold&&) noexcept = default;
  WriteHold& operator=(WriteHold&&) = delete;
  WriteHold(const WriteHold&) = delete;
  WriteHold& operator=(const WriteHold&) = delete;
  ~WriteHold();

 private:
  std::shared_ptr<Connection> conn_;
};

// One gRPC call on a Connection. Held by the application as a shared_ptr; its methods must be
// called on the connection's thread. After on_end every method is a no-op.
class Stream {
 public:
  int32_t id() const { return id_; }
  // Queues one message (framed with grpc_prefix); false when the stream can no longer send.
  bool send_message(std::string_view payload);
  // The same for a payload already placed after kGrpcPrefixBytes bytes of `framed` (whatever they
  // hold is overwritten with the prefix): the payload is not copied again. `borrowed` bytes
  // follow those of `framed` in the message and are not copied into the queue at all: the caller
  // keeps them alive and unchanged until on_drained runs after this message, or the stream ends.
  bool send_framed(std::string&& framed, std::string_view borrowed = {});
  // Server role: sends the response headers now with `md` (otherwise they go with the first
  // message or finish()).
  void send_headers(const Metadata& md);
  // Server role: ends the call with `status` and trailing metadata once queued messages are
  // sent. With nothing sent before, this is a trailers-only response.
  void finish(const GrpcStatus& status, const Metadata& trailers = {});
  // Client role: no more messages (END_STREAM after the queued ones).
  void half_close();
  // Ends the call now, whatever is queued: a server drops what waits (a message half sent too)
  // and sends its status in trailers at once, which flow control does not hold (`status`, or the
  // one finish() gave if its trailers still waited); a client resets the stream (RST_STREAM
  // CANCEL). on_end follows.
  void abort(const GrpcStatus& status);
  // Resets the stream (RST_STREAM CANCEL). on_end follows with CANCELLED.
  void cancel();
  // While paused, received messages wait here and the HTTP/2 window is not given back, so the
  // peer stops at the stream's window. Resuming delivers what waits.
  void pause_reading();
  void resume_reading();
  bool reading_paused() const { return paused_; }
  // Framed bytes queued and not yet taken by HTTP/2 (the peer's window and the socket decide).
  size_t queued_bytes() const { return queued_bytes_; }
  // Received and decoded but undelivered bytes plus a partial message (what a paused stream
  // holds).
  size_t buffered_bytes() const;
  // Server role: messages up to this size are sent whole or not begun (see Connection's
  // "message-aligned sending"); larger ones go as the window allows.
  size_t aligned_message_limit() const;
  // Called (on the connection's thread) when queued_bytes() drops to 0 after a send.
  void set_on_drained(std::function<void()> cb) { on_drained_ = std::move(cb); }
  void set_callbacks(StreamCallbacks cb) { cb_ = std::move(cb); }
  bool ended() const { return ended_; }
  // Whether the stream's receive or send queue holds memory (none while both are empty).
  bool queues_hold_memory() const { return inbox_.holds_memory() || outbox_.holds_memory(); }
  // Holds the connection's writes back until the returned object goes, so that what is queued
  // meanwhile leaves in one write: a last message and the status after it, which would otherwise
  // take two (the status waits for the write that carries the message). Empty once the stream
  // ended.
  [[nodiscard]] WriteHold hold_writes();

  // Internal: constructed by Connection.
  Stream(Connection* conn, int32_t id, size_t max_message_bytes)
      : conn_(conn), id_(id), decoder_(max_message_bytes) {}

 private:
  friend class Connection;
  void on_data(const uint8_t* data, size_t len);
  void deliver();
  void end(const GrpcStatus& status);
  bool submit_response_headers(bool with_data);
  // Server role: drops the queued messages not yet started (a message half sent stays, so the
  // framing stays whole).
  void drop_unstarted();

  Connection* conn_;  // null once the stream ended
  int32_t id_;
  StreamCallbacks cb_;
  std::function<void()> on_drained_;
  GrpcMessageDecoder decoder_;
  // Receive side.
  IdleFreeQueue<std::string> inbox_;
  size_t inbox_bytes_ = 0;
  size_t unconsumed_ = 0;  // DATA bytes received whose window was not given back
  bool paused_ = false;
  bool remote_ended_ = false;              // END_STREAM received
  bool half_close_given_ = false;          // on_half_close called
  std::optional<GrpcStatus> pending_end_;  // the end, delivered once the inbox drained
  // Send side.
  // A queued message: its `owned` bytes (the prefix first), then the sender's `borrowed` ones.
  struct Outgoing {
    std::string owned;
    std::string_view borrowed;
    size_t size() const { return owned.size() + borrowed.size(); }
  };
  IdleFreeQueue<Outgoing> outbox_;
  size_t out_offset_ = 0;  // bytes of outbox_.front() already taken
  size_t queued_bytes_ = 0;
  bool data_started_ = false;  // a data provider is attached (request / response headers sent)
  bool deferred_ = false;      // the data provider returned DEFERRED
  bool window_deferred_ = false;  // deferred until the peer's window takes the next whole message
  bool local_end_ = false;     // half_close() / finish() asked
  bool local_done_ = false;    // END_STREAM (or trailers) handed to HTTP/2
  bool headers_sent_ = false;  // server: response headers submitted
  bool trailers_only_ = false;
  bool aborted_ = false;  // server: abort() sent the trailers without the data provider
  GrpcStatus finish_status_;
  Metadata finish_trailers_;
  // Client: response state.
  bool response_seen_ = false;
  bool request_seen_ = false;  // server: the request headers were dispatched
  std::optional<GrpcStatus> trailer_status_;
  int http_status_ = 0;
  Metadata headers_in_;          // the header block being received (server: then response metadata)
  HeaderBlockCheck check_;       // the block being received (header_check.h)
  // Server: the request's content-length, and the DATA bytes received (they must match).
  std::optional<uint64_t> content_length_;
  uint64_t data_received_ = 0;
  // Server: refused with an HTTP error before it was read (not gRPC); the rest of the request is
  // read and dropped rather than reset, so its frames are still checked.
  bool rejected_ = false;
  bool malformed_ = false;  // reset for breaking HTTP/2's rules: nothing more is read
  Metadata trailers_in_;         // client: the trailing metadata
  bool trailers_ready_ = false;  // client: trailers with END_STREAM arrived
  bool h2_closed_ = false;       // nghttp2 closed the stream (window bookkeeping ends)
  std::optional<GrpcStatus> local_status_;  // what a local cancel/deadline/error ends with
  std::unique_ptr<asio::steady_timer> deadline_;
  bool ended_ = false;
};

// What a server learns of a new call.
struct CallInfo {
  std::string path;  // "/AgentService/Connect"
  std::string authority;
  Metadata metadata;                                 // custom metadata of the request headers
  std::optional<std::chrono::milliseconds> timeout;  // grpc-timeout, when sent
};

struct ConnectionOptions {
  // Advertised to the peer (SETTINGS_MAX_CONCURRENT_STREAMS); excess streams are refused.
  uint32_t max_concurrent_streams = 1000;
  // Receive windows: per stream (SETTINGS_INITIAL_WINDOW_SIZE) and for the connection.
  int32_t stream_window = 1024 * 1024;
  int32_t connection_window = 16 * 1024 * 1024;
  size_t max_message_bytes = kMaxMessageBytes;
  // A PING every `keepalive_interval` (0: none); no ACK within `keepalive_timeout` closes the
  // connection.
  std::chrono::milliseconds keepalive_interval{0};
  std::chrono::milliseconds keepalive_timeout{20000};
  // Server role: the peer's PINGs, policed as gRPC servers police them (grpc-go's keepalive
  // EnforcementPolicy). A PING sooner than `min_peer_ping_interval` after the peer's previous
  // one is a strike, unless this side sent HEADERS or DATA in between; with no open call and
  // !peer_pings_without_calls the minimum is 2 hours. More than `max_ping_strikes` strikes:
  // GOAWAY ENHANCE_YOUR_CALM "too_many_pings", and the connection closes. 0: any rate.
  std::chrono::milliseconds min_peer_ping_interval{0};
  bool peer_pings_without_calls = true;
  int max_ping_strikes = 2;
  // Client role: :authority and :scheme of requests.
  std::string authority = "localhost";
  std::string scheme = "http";
  std::string user_agent = "konn-h2";
  // A log line prefix identifying the connection.
  std::string log_name = "h2";
};

// One HTTP/2 connection carrying gRPC calls, in the server or client role, over one Asio byte
// stream (Transport). It lives on the transport's executor, which must be one thread (an
// io_context run by one thread, or a strand): every method but post() must be called there, and
// every callback runs there. Reads go straight into nghttp2; everything nghttp2 has to send is
// gathered into one write, and the next is formed only when that write completed, so a peer that
// stops reading holds at most one write buffer plus the queues the application bounds
// (Stream::queued_bytes). Received DATA gives window back only as the application takes messages.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Role { Server, Client };
  // Server role: a new call; set its callbacks (stream->set_callbacks) before returning.
  using CallHandler = std::function<void(const std::shared_ptr<Stream>&, const CallInfo&)>;

  static std::shared_ptr<Connection> create(Role role, std::unique_ptr<Transport> transport,
                                            ConnectionOptions options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void set_call_handler(CallHandler h) { on_call_ = std::move(h); }
  // Called once when the connection is gone, with the reason ("" for an orderly end).
  void set_on_close(std::function<void(const std::string&)> cb) { on_close_ = std::move(cb); }
  // The peer's GOAWAY (last stream id it processes, error code).
  void set_on_goaway(std::function<void(int32_t, uint32_t)> cb) { on_goaway_ = std::move(cb); }

  // TLS handshake (ALPN h2 required) if any, the connection preface and SETTINGS, then reading.
  void start();

  // Client role: a new call to `path` ("/AgentService/Connect"). Null when the connection is
  // closed or going away. With a timeout, grpc-timeout is sent and the call ends with
  // DEADLINE_EXCEEDED when it passes.
  std::shared_ptr<Stream> start_call(const std::string& path, const Metadata& metadata,
                                     StreamCallbacks callbacks,
                                     std::optional<std::chrono::milliseconds> timeout = {});

  // GOAWAY (server: with the last stream processed), then closes once the open streams ended.
  void shutdown();
  // Closes at once: every open stream ends with UNAVAILABLE and `reason`.
  void close(const std::string& reason) { close(reason, false); }

  // Runs `fn` on the connection's thread (thread-safe).
  void post(std::function<void()> fn);
  const asio::any_io_executor& executor() const { return executor_; }

  bool closed() const { return closed_; }
  // The peer's first SETTINGS frame arrived (its connection preface is complete).
  bool peer_settings_received() const { return peer_settings_received_; }
  size_t open_streams() const { return streams_.size(); }
  // Bytes of the write in flight (the only transport buffer).
  size_t write_buffer_bytes() const { return out_.size(); }
  // Bytes the write buffer keeps allocated (an idle connection keeps at most a few KiB).
  size_t write_buffer_capacity() const { return out_.capacity(); }
  Role role() const { return role_; }
  const ConnectionOptions& options() const { return options_; }

  // Server role: the size up to which a message is begun only when the peer's windows take all of
  // it (half the peer's SETTINGS_INITIAL_WINDOW_SIZE), so a call aborted while the peer does not
  // read ends between messages, where its status can still be read (grpc-go before 1.73 reports
  // any end in the middle of a message, trailers or reset, as INTERNAL "unexpected EOF"). Half:
  // gRPC clients give window back by the time a quarter (grpc-go) or a half (nghttp2, gRPC C++)
  // of it was read, so a message of that size always fits again, and waiting cannot deadlock.
  size_t aligned_message_limit();

  // Internal (nghttp2 callbacks, Stream and WriteHold).
  void flush();
  void hold_writes() { ++write_holds_; }
  void release_writes();
  nghttp2_session* session() { return session_; }
  // Server: whether the stream's request was refused with an HTTP error and its rest is being
  // read (not reset).
  bool rejected(int32_t stream_id);
  int on_begin_frame(int32_t stream_id, uint8_t type);
  int on_begin_headers(int32_t stream_id, int cat);
  int on_header(int32_t stream_id, std::string_view name, std::string_view value);
  int on_frame_recv(const void* frame);
  int on_data_chunk(int32_t stream_id, const uint8_t* data, size_t len);
  int on_stream_close(int32_t stream_id, uint32_t error_code);
  ssize_t read_data(int32_t stream_id, uint8_t* buf, size_t length, uint32_t* flags);
  int send_data(const void* frame, const uint8_t* framehd, size_t length);

 private:
  // `peer_gone`: the peer ended the connection (EOF, reset, broken pipe). With no stream open
  // that is how a single-use connection ends (kube-apiserver's, one per tunnel): logged at
  // debug, not once per tunnel at info.
  void close(const std::string& reason, bool peer_gone);
  Connection(Role role, std::unique_ptr<Transport> transport, ConnectionOptions options);
  void start_session();
  void do_read();
  void finish_server_headers(Stream& s);
  void finish_client_headers(Stream& s, int cat, bool end_stream);
  void end_client_request(int32_t stream_id);
  // The stream's headers or framing broke HTTP/2's rules (header_check.h): RST_STREAM
  // PROTOCOL_ERROR, logged with `why`.
  void reset_malformed(Stream& s, const std::string& why);
  // Server: whether `stream_id` closed lately (frames may still come for it after our reset).
  bool recently_closed(int32_t stream_id) const;
  void arm_deadline(const std::shared_ptr<Stream>& s, std::chrono::milliseconds timeout);
  void keepalive_tick();
  void police_peer_ping();
  // Calls on_drained of the streams whose send queue emptied (outside nghttp2's calls).
  void run_drained();
  void maybe_finish_shutdown();
  // Whether the connection still reads: nghttp2 wants to, or a server lingers for the client's
  // close after its GOAWAY (linger_).
  bool wants_read();
  // Server: closes with `reason` once the client closed or a second passed, reading and dropping
  // what it sends meanwhile (linger_). Client: closes at once.
  void linger_close(std::string reason);
  // Ends every open (and parked) stream with UNAVAILABLE and `reason`.
  void end_streams(const std::string& reason);
  Stream* find(int32_t id);

  Role role_;
  std::unique_ptr<Transport> transport_;
  ConnectionOptions options_;
  asio::any_io_executor executor_;
  nghttp2_session* session_ = nullptr;
  std::unordered_map<int32_t, std::shared_ptr<Stream>> streams_;
  CallHandler on_call_;
  std::function<void(const std::string&)> on_close_;
  std::function<void(int32_t, uint32_t)> on_goaway_;
  std::string out_;
  std::vector<std::shared_ptr<Stream>> drained_;
  std::vector<std::weak_ptr<Stream>> parked_;  // closed in HTTP/2, end not yet delivered (paused)
  bool writing_ = false;
  bool started_ = false;   // the transport is ready (TLS handshake done)
  bool in_flush_ = false;  // inside nghttp2_session_mem_send
  bool goaway_received_ = false;
  std::string close_after_flush_;  // a fatal session error: close once the GOAWAY is written
  std::string recv_error_;         // why a callback failed the session (a connection error)
  // Server: the highest stream id the client opened, and the ids closed last (a ring).
  int32_t max_peer_stream_id_ = 0;
  FrameScan scan_;  // the peer's frame heads (header_check.h)
  // Server: a lingering close (linger_close): what the client still sends is read and dropped
  // until it closes, or for a second, so that our close is a FIN after our last frames (a
  // GOAWAY with its reason), not a reset that can destroy them unread.
  std::unique_ptr<asio::steady_timer> linger_;
  std::string linger_reason_;
  bool discard_input_ = false;
  bool read_pending_ = false;  // a transport read is outstanding
  // Reading waits for the write in flight: what the peer's frames made us queue (answers, resets)
  // is past kMaxQueuedFrames, because the peer sends faster than it reads.
  bool read_waits_for_write_ = false;
  // Server role: how much of `n` bytes of the stream's queue the next DATA frame may take so that
  // no message within aligned_message_limit() is begun unless the peer's windows take all of it
  // (0: the next message waits).
  size_t aligned_take(const Stream& s, size_t n);
  // Resumes the streams deferred for a whole message (window_deferred_): `stream_id`, or all (0).
  void resume_window_deferred(int32_t stream_id);
  std::array<int32_t, 32> recently_closed_{};
  size_t closed_next_ = 0;
  size_t rejected_open_ = 0;  // streams with rejected_ still open
  bool in_recv_ = false;           // inside nghttp2_session_mem_recv: no mem_send now
  int write_holds_ = 0;            // WriteHolds alive: flush() waits for the last
  bool flush_wanted_ = false;      // flush() was called while held
  bool closed_ = false;
  bool shutting_down_ = false;
  asio::steady_timer keepalive_;
  bool ping_outstanding_ = false;
  bool peer_settings_received_ = false;
  // Ping policing (min_peer_ping_interval).
  std::optional<std::chrono::steady_clock::time_point> last_peer_ping_;
  int ping_strikes_ = 0;
  bool ping_strikes_reset_ = false;  // HEADERS or DATA sent since the peer's last PING
};

}  // namespace konn::core::h2
