#include "core/h2/connection.h"
#include "core/h2/session_memory.h"

#include <algorithm>
#include <charconv>
#include <nghttp2/nghttp2.h>
#include <sys/types.h>
#include <utility>

#include <asio/post.hpp>
#include <fmt/format.h>

#include "core/log/log_macros.h"
#include "core/log/logger.h"
#include "core/log/rate_limit.h"

namespace konn::core::h2 {

namespace {

// The peer ended the connection: what a client that is done does, not a fault.
bool peer_went_away(const std::error_code& ec) {
  return ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::ssl::error::stream_truncated;
}

// One gathered write stops growing past this; the rest waits for the write to complete.
constexpr size_t kWriteBatch = 256 * 1024;
// The write buffer an idle connection may keep (a few small frames' worth).
constexpr size_t kKeptWriteBuffer = 4 * 1024;
// Custom metadata of one header block (keys and values) beyond this resets the stream.
constexpr size_t kMaxHeaderBlock = 64 * 1024;
// Requests refused with an HTTP error (not gRPC) whose rest is read rather than reset: at most
// this many at once per connection (and no more than its concurrent-stream limit, which they
// count towards), and this much of each one's body.
constexpr size_t kMaxRejectedOpen = 1024;
constexpr uint64_t kMaxRejectedBody = 64 * 1024;
// Frames nghttp2 may hold for a write in flight (answers, resets, ACKs) before reading stops
// until the write completes: a peer that sends requests without reading the answers must not
// grow the queue without bound.
constexpr size_t kMaxQueuedFrames = 4096;

const std::shared_ptr<spdlog::logger>& logger() {
  static const auto log = core::log::get("h2");
  return log;
}

Connection* self_of(void* user_data) { return static_cast<Connection*>(user_data); }

nghttp2_nv make_nv(std::string_view name, std::string_view value) {
  // nghttp2 copies names and values while the frame is submitted (no NO_COPY flags).
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

// Headers this library writes or reads itself; never custom metadata.
bool reserved_header(std::string_view name) {
  return name.empty() || name[0] == ':' || name == "content-type" || name == "te" ||
         name == "grpc-timeout" || name == "grpc-encoding" || name == "grpc-accept-encoding" ||
         name == "grpc-status" || name == "grpc-message" || name == "content-length";
}

// grpc-message is percent-encoded: bytes outside printable ASCII, and '%'.
std::string percent_encode(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c > 0x7e || c == '%') {
      out += fmt::format("%{:02X}", static_cast<unsigned>(c));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() + 0 && hex_value(s[i + 1]) >= 0 &&
        hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The longest timeout a call is given: eight digits of hours (11 000 years) would overflow a
// steady_clock time point in nanoseconds, and a timer armed with it would fire at once.
constexpr uint64_t kMaxTimeoutMs = uint64_t{100} * 365 * 24 * 3600 * 1000;  // 100 years

// "1000m", "5S": at most 8 digits and a unit (gRPC's grpc-timeout), capped at kMaxTimeoutMs.
std::optional<std::chrono::milliseconds> parse_grpc_timeout(std::string_view v) {
  if (v.size() < 2 || v.size() > 9) return std::nullopt;
  uint64_t n = 0;  // at most 8 digits: n * 3 600 000 fits
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size() - 1, n);
  if (ec != std::errc() || end != v.data() + v.size() - 1) return std::nullopt;
  uint64_t ms = 0;
  switch (v.back()) {
    case 'H':
      ms = n * 3600 * 1000;
      break;
    case 'M':
      ms = n * 60 * 1000;
      break;
    case 'S':
      ms = n * 1000;
      break;
    case 'm':
      ms = n;
      break;
    case 'u':
      ms = (n + 999) / 1000;
      break;
    case 'n':
      ms = (n + 999999) / 1000000;
      break;
    default:
      return std::nullopt;
  }
  return std::chrono::milliseconds(std::min(ms, kMaxTimeoutMs));
}

std::string format_grpc_timeout(std::chrono::milliseconds t) {
  const auto ms = std::max<int64_t>(t.count(), 0);
  if (ms < 100000000) return fmt::format("{}m", ms);
  return fmt::format("{}S", std::min<int64_t>(ms / 1000, 99999999));
}

// gRPC's mapping of an HTTP status without grpc-status.
int grpc_code_for_http(int status) {
  switch (status) {
    case 400:
      return grpc_code::kInternal;
    case 401:
      return 16;  // UNAUTHENTICATED
    case 403:
      return 7;  // PERMISSION_DENIED
    case 404:
      return grpc_code::kUnimplemented;
    case 429:
    case 502:
    case 503:
    case 504:
      return grpc_code::kUnavailable;
    default:
      return grpc_code::kUnknown;
  }
}

GrpcStatus status_for_reset(uint32_t error_code) {
  switch (error_code) {
    case NGHTTP2_CANCEL:
      return {grpc_code::kCancelled, "the peer cancelled the stream"};
    case NGHTTP2_REFUSED_STREAM:
      return {grpc_code::kUnavailable, "the peer refused the stream (REFUSED_STREAM)"};
    case NGHTTP2_ENHANCE_YOUR_CALM:
      return {grpc_code::kResourceExhausted, "the peer reset the stream: ENHANCE_YOUR_CALM"};
    default:
      return {grpc_code::kInternal, fmt::format("stream reset with HTTP/2 error {} ({})",
                                                nghttp2_http2_strerror(error_code), error_code)};
  }
}

std::optional<int> parse_int(std::string_view v) {
  int n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  return n;
}

// nghttp2 callbacks: thin trampolines into Connection.
int cb_begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user) {
  return self_of(user)->on_begin_frame(hd->stream_id, hd->type);
}
int cb_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  return self_of(user)->on_begin_headers(frame->hd.stream_id, frame->headers.cat);
}
int cb_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
              const uint8_t* value, size_t valuelen, uint8_t, void* user) {
  return self_of(user)->on_header(frame->hd.stream_id,
                                  {reinterpret_cast<const char*>(name), namelen},
                                  {reinterpret_cast<const char*>(value), valuelen});
}
int cb_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  return self_of(user)->on_frame_recv(frame);
}
int cb_data_chunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data, size_t len,
                  void* user) {
  return self_of(user)->on_data_chunk(stream_id, data, len);
}
int cb_stream_close(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* user) {
  return self_of(user)->on_stream_close(stream_id, error_code);
}
ssize_t cb_read_data(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                     uint32_t* flags, nghttp2_data_source*, void* user) {
  return self_of(user)->read_data(stream_id, buf, length, flags);
}
int cb_send_data(nghttp2_session*, nghttp2_frame* frame, const uint8_t* framehd, size_t length,
                 nghttp2_data_source*, void* user) {
  return self_of(user)->send_data(frame, framehd, length);
}

}  // namespace

std::optional<std::string> find_metadata(const Metadata& md, std::string_view key) {
  for (const auto& [k, v] : md) {
    if (k == key) return v;
  }
  return std::nullopt;
}

// --- WriteHold ------------------------------------------------------------------------------

WriteHold::WriteHold(std::shared_ptr<Connection> conn) : conn_(std::move(conn)) {
  conn_->hold_writes();
}

WriteHold::~WriteHold() {
  if (conn_) conn_->release_writes();
}

// --- Stream ---------------------------------------------------------------------------------

size_t Stream::buffered_bytes() const { return inbox_bytes_ + decoder_.partial_bytes(); }

size_t Stream::aligned_message_limit() const {
  return conn_ == nullptr ? 0 : conn_->aligned_message_limit();
}

bool Stream::send_message(std::string_view payload) {
  std::string framed;
  framed.reserve(kGrpcPrefixBytes + payload.size());
  framed.append(kGrpcPrefixBytes, '\0');
  framed.append(payload);
  return send_framed(std::move(framed));
}

WriteHold Stream::hold_writes() {
  if (ended_ || conn_ == nullptr || conn_->closed()) return {};
  return WriteHold(conn_->shared_from_this());
}

bool Stream::send_framed(std::string&& framed, std::string_view borrowed) {
  if (ended_ || conn_ == nullptr || conn_->closed() || local_end_ || trailers_only_) return false;
  if (framed.size() < kGrpcPrefixBytes) return false;
  const size_t payload = framed.size() - kGrpcPrefixBytes + borrowed.size();
  if (payload > conn_->options().max_message_bytes) return false;
  auto prefix = grpc_prefix(payload);
  framed.replace(0, prefix.size(), prefix.data(), prefix.size());
  queued_bytes_ += framed.size() + borrowed.size();
  outbox_.push_back(Outgoing{std::move(framed), borrowed});
  if (conn_->role() == Connection::Role::Server && !headers_sent_) {
    if (!submit_response_headers(true)) return false;
  } else if (deferred_) {
    deferred_ = false;
    nghttp2_session_resume_data(conn_->session(), id_);
  }
  conn_->flush();
  return true;
}

bool Stream::submit_response_headers(bool with_data) {
  headers_sent_ = true;
  std::vector<nghttp2_nv> nv{make_nv(":status", "200"),
                             make_nv("content-type", "application/grpc")};
  for (const auto& [k, v] : headers_in_) nv.push_back(make_nv(k, v));
  nghttp2_data_provider provider{};
  provider.read_callback = cb_read_data;
  const int rv = nghttp2_submit_response(conn_->session(), id_, nv.data(), nv.size(),
                                         with_data ? &provider : nullptr);
  Metadata().swap(headers_in_);  // nghttp2 copied them; the stream keeps no block for its life
  data_started_ = with_data;
  return rv == 0;
}

void Stream::send_headers(const Metadata& md) {
  if (ended_ || conn_ == nullptr || conn_->closed() || conn_->role() != Connection::Role::Server ||
      headers_sent_) {
    return;
  }
  // headers_in_ of a server stream is free once the request was dispatched: it carries the
  // response metadata until the headers are submitted.
  headers_in_.clear();
  for (const auto& kv : md) {
    if (!reserved_header(kv.first)) headers_in_.push_back(kv);
  }
  submit_response_headers(true);
  conn_->flush();
}

void Stream::finish(const GrpcStatus& status, const Metadata& trailers) {
  if (ended_ || conn_ == nullptr || conn_->closed() || conn_->role() != Connection::Role::Server ||
      local_end_) {
    return;
  }
  local_end_ = true;
  finish_status_ = status;
  finish_trailers_.clear();
  for (const auto& kv : trailers) {
    if (!reserved_header(kv.first)) finish_trailers_.push_back(kv);
  }
  if (!headers_sent_) {
    // Trailers-only: one HEADERS frame with the status and END_STREAM.
    headers_sent_ = true;
    trailers_only_ = true;
    local_done_ = true;
    const std::string code = std::to_string(status.code);
    const std::string message = percent_encode(status.message);
    std::vector<nghttp2_nv> nv{make_nv(":status", "200"),
                               make_nv("content-type", "application/grpc"),
                               make_nv("grpc-status", code)};
    if (!message.empty()) nv.push_back(make_nv("grpc-message", message));
    for (const auto& [k, v] : finish_trailers_) nv.push_back(make_nv(k, v));
    nghttp2_submit_response(conn_->session(), id_, nv.data(), nv.size(), nullptr);
  } else if (deferred_) {
    deferred_ = false;
    nghttp2_session_resume_data(conn_->session(), id_);
  }
  conn_->flush();
}

void Stream::half_close() {
  if (ended_ || conn_ == nullptr || conn_->closed() || conn_->role() != Connection::Role::Client ||
      local_end_) {
    return;
  }
  local_end_ = true;
  if (deferred_) {
    deferred_ = false;
    nghttp2_session_resume_data(conn_->session(), id_);
  }
  conn_->flush();
}

void Stream::cancel() {
  if (ended_ || conn_ == nullptr || conn_->closed()) return;
  if (!local_status_) local_status_ = GrpcStatus{grpc_code::kCancelled, "cancelled locally"};
  nghttp2_submit_rst_stream(conn_->session(), NGHTTP2_FLAG_NONE, id_, NGHTTP2_CANCEL);
  conn_->flush();
}

void Stream::drop_unstarted() {
  while (outbox_.size() > (out_offset_ > 0 ? 1 : 0)) {
    queued_bytes_ -= outbox_.back().size();
    outbox_.pop_back();
  }
}

void Stream::abort(const GrpcStatus& status) {
  if (ended_ || conn_ == nullptr || conn_->closed()) return;
  if (conn_->role() == Connection::Role::Server && !local_done_) {
    // As gRPC servers cancel with a status: the trailers go at once, in a HEADERS frame that flow
    // control does not hold, whatever waits (even a message half sent, which the client then
    // drops); the rest of the request is reset once they are out (on_frame_send).
    const bool mid_message = out_offset_ > 0;
    outbox_.clear();
    out_offset_ = 0;
    queued_bytes_ = 0;
    if (!local_end_) finish_status_ = status;
    if (mid_message && finish_status_.code == grpc_code::kResourceExhausted) {
      // Trailers after part of a message read as a broken message (grpc-go: INTERNAL "unexpected
      // EOF"), not as this status; gRPC clients read RST_STREAM ENHANCE_YOUR_CALM as
      // RESOURCE_EXHAUSTED. (A client that stopped reading is mostly mid-message.)
      local_end_ = true;
      local_done_ = true;
      aborted_ = true;
      local_status_ = finish_status_;
      nghttp2_submit_rst_stream(conn_->session(), NGHTTP2_FLAG_NONE, id_,
                                NGHTTP2_ENHANCE_YOUR_CALM);
      conn_->flush();
      return;
    }
    if (!headers_sent_) {
      finish(finish_status_);  // trailers-only: nothing was sent, nothing waits
      return;
    }
    local_end_ = true;
    local_done_ = true;
    aborted_ = true;
    const std::string code = std::to_string(finish_status_.code);
    const std::string message = percent_encode(finish_status_.message);
    std::vector<nghttp2_nv> nv{make_nv("grpc-status", code)};
    if (!message.empty()) nv.push_back(make_nv("grpc-message", message));
    nghttp2_submit_headers(conn_->session(), NGHTTP2_FLAG_END_STREAM, id_, nullptr, nv.data(),
                           nv.size(), nullptr);
    conn_->flush();
    return;
  }
  if (!local_status_) local_status_ = status;
  nghttp2_submit_rst_stream(conn_->session(), NGHTTP2_FLAG_NONE, id_, NGHTTP2_CANCEL);
  conn_->flush();
}

void Stream::pause_reading() { paused_ = true; }

void Stream::resume_reading() {
  if (!paused_) return;
  paused_ = false;
  deliver();
  if (conn_ != nullptr) conn_->flush();
}

void Stream::on_data(const uint8_t* data, size_t len) {
  unconsumed_ += len;
  std::string_view in(reinterpret_cast<const char*>(data), len);
  while (!decoder_.failed() && !in.empty()) {
    auto r = decoder_.decode(in);
    in.remove_prefix(r.consumed);
    if (r.status == GrpcMessageDecoder::Status::Complete) {
      std::string m = decoder_.take_message();
      inbox_bytes_ += m.size() + kGrpcPrefixBytes;
      inbox_.push_back(std::move(m));
    } else if (r.status == GrpcMessageDecoder::Status::Invalid) {
      KONN_LOG(logger(), warn, "{} stream {}: {}", conn_->options().log_name, id_,
               decoder_.error());
      GrpcStatus st{decoder_.grpc_status(), decoder_.error()};
      if (conn_->role() == Connection::Role::Server) {
        finish(st);
      } else {
        local_status_ = st;
        cancel();
      }
    }
  }
  if (decoder_.failed()) {
    // Nothing more is read from this stream: give the window back at once.
    nghttp2_session_consume(conn_->session(), id_, unconsumed_);
    unconsumed_ = 0;
    return;
  }
  deliver();
}

void Stream::deliver() {
  while (!paused_ && !ended_ && !inbox_.empty()) {
    std::string m = std::move(inbox_.front());
    inbox_.pop_front();
    inbox_bytes_ -= m.size() + kGrpcPrefixBytes;
    if (cb_.on_message) cb_.on_message(std::move(m));
  }
  if (paused_ || ended_) return;
  // The application took every whole message: their window goes back, and so does that of a
  // message still arriving (one larger than the window could not arrive otherwise; the decoder
  // holds it, at most max_message_bytes).
  if (unconsumed_ > 0 && conn_ != nullptr && !conn_->closed() && !h2_closed_) {
    nghttp2_session_consume(conn_->session(), id_, unconsumed_);
    unconsumed_ = 0;
  }
  if (remote_ended_ && !half_close_given_ && conn_ != nullptr &&
      conn_->role() == Connection::Role::Server && !pending_end_) {
    half_close_given_ = true;
    if (decoder_.in_message()) {
      finish({grpc_code::kInternal, "the client's stream ended in the middle of a message"});
    } else if (cb_.on_half_close) {
      cb_.on_half_close();
    }
  }
  if (pending_end_ && !ended_) end(*pending_end_);
}

void Stream::end(const GrpcStatus& status) {
  if (ended_) return;
  ended_ = true;
  if (deadline_) deadline_->cancel();
  outbox_.clear();
  queued_bytes_ = 0;
  inbox_.clear();
  inbox_bytes_ = 0;
  auto cb = std::move(cb_.on_end);
  Metadata trailers = std::move(trailers_in_);
  cb_ = {};
  on_drained_ = nullptr;
  conn_ = nullptr;
  if (cb) cb(status, trailers);
}

// --- Connection -----------------------------------------------------------------------------

std::shared_ptr<Connection> Connection::create(Role role, std::unique_ptr<Transport> transport,
                                               ConnectionOptions options) {
  // Exception: `new`, because make_shared cannot reach the private constructor (a Connection
  // must be owned by a shared_ptr from the start: its handlers capture it).
  return std::shared_ptr<Connection>(
      new Connection(role, std::move(transport), std::move(options)));
}

Connection::Connection(Role role, std::unique_ptr<Transport> transport, ConnectionOptions options)
    : role_(role),
      transport_(std::move(transport)),
      options_(std::move(options)),
      executor_(transport_->executor()),
      scan_(role == Role::Server ? sizeof(NGHTTP2_CLIENT_MAGIC) - 1 : 0),
      keepalive_(executor_) {
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, cb_begin_frame);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, cb_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs, cb_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, cb_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, cb_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, cb_stream_close);
  nghttp2_session_callbacks_set_send_data_callback(cbs, cb_send_data);
  nghttp2_session_callbacks_set_on_frame_send_callback(
      cbs, [](nghttp2_session*, const nghttp2_frame* frame, void* user) -> int {
        auto* self = self_of(user);
        if (frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) {
          self->ping_strikes_reset_ = true;
        }
        if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
          KONN_LOG(logger(), warn, "{} sent GOAWAY: {}", self->options().log_name,
                   nghttp2_http2_strerror(frame->goaway.error_code));
        }
        // A server that ended its response before the client ended its request resets the rest
        // of the request (RFC 9113 8.1), as gRPC servers do; not a request refused with an HTTP
        // error, whose rest is read and dropped (Stream::rejected_).
        if (self->role() == Role::Server && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0 &&
            (frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
            !self->rejected(frame->hd.stream_id)) {
          if (nghttp2_session_get_stream_remote_close(self->session(), frame->hd.stream_id) == 0) {
            nghttp2_submit_rst_stream(self->session(), NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                      NGHTTP2_NO_ERROR);
          }
        }
        return 0;
      });
  nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(
      cbs, [](nghttp2_session*, const nghttp2_frame* frame, int error, void* user) -> int {
        KONN_LOG(logger(), warn, "{} invalid {} frame on stream {}: {}",
                 self_of(user)->options().log_name, static_cast<int>(frame->hd.type),
                 frame->hd.stream_id, nghttp2_strerror(error));
        return 0;
      });
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);
  // nghttp2's HTTP messaging checks refuse an :authority that is not an RFC 3986 authority, which
  // kube-apiserver 1.20's gRPC client sends (the unix socket path it dialled). HeaderBlockCheck
  // makes the checks instead, that one relaxed (core/h2/README.md, "Header checks").
  nghttp2_option_set_no_http_messaging(opt, 1);
  // No state kept for closed streams: with the frontend's unbounded concurrent-stream limit,
  // nghttp2 kept each one (about 1.3 KB) for the connection's life. FrameScan finds the frames
  // that such state would have refused.
  nghttp2_option_set_no_closed_streams(opt, 1);
  if (role_ == Role::Server) {
    // No HPACK dynamic table for what a server sends: a gRPC response's headers and trailers are
    // a few short fields, and the table's ring and entries stayed with every connection for its
    // life (an agent's is as long-lived as the agent). The peer is told by a table size update.
    nghttp2_option_set_max_deflate_dynamic_table_size(opt, 0);
    nghttp2_session_server_new3(&session_, cbs, this, opt, session_memory());
  } else {
    nghttp2_session_client_new3(&session_, cbs, this, opt, session_memory());
  }
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);

  std::vector<nghttp2_settings_entry> settings{
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(options_.stream_window)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(kMaxHeaderBlock)},
  };
  if (role_ == Role::Client) settings.push_back({NGHTTP2_SETTINGS_ENABLE_PUSH, 0});
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size());
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, options_.connection_window);
}

Connection::~Connection() {
  // Streams the application still holds must not reach a deleted connection.
  for (auto& [id, s] : streams_) s->conn_ = nullptr;
  for (auto& weak : parked_) {
    if (auto s = weak.lock()) s->conn_ = nullptr;
  }
  nghttp2_session_del(session_);
}

void Connection::start() {
  transport_->async_handshake(role_ == Role::Server,
                              [self = shared_from_this()](std::error_code ec) {
                                if (self->closed_) return;
                                if (ec) {
                                  self->close(fmt::format("TLS handshake: {}", ec.message()));
                                  return;
                                }
                                self->start_session();
                              });
}

void Connection::start_session() {
  started_ = true;
  // A client speaks first (its preface); a server's SETTINGS leave with the answer to it, the
  // ACK of the client's SETTINGS, in one write.
  if (role_ == Role::Client) flush();
  do_read();
  if (options_.keepalive_interval.count() > 0) {
    keepalive_.expires_after(options_.keepalive_interval);
    keepalive_.async_wait([weak = weak_from_this()](std::error_code ec) {
      if (auto self = weak.lock(); self && !ec) self->keepalive_tick();
    });
  }
}

void Connection::keepalive_tick() {
  if (closed_) return;
  if (ping_outstanding_) {
    KONN_LOG(logger(), warn, "{} keepalive PING not acknowledged within {} ms", options_.log_name,
             options_.keepalive_timeout.count());
    close(fmt::format("keepalive PING not acknowledged within {} ms",
                      options_.keepalive_timeout.count()));
    return;
  }
  ping_outstanding_ = true;
  nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, nullptr);
  flush();
  keepalive_.expires_after(options_.keepalive_timeout);
  keepalive_.async_wait([weak = weak_from_this()](std::error_code ec) {
    if (auto self = weak.lock(); self && !ec) self->keepalive_tick();
  });
}

void Connection::police_peer_ping() {
  if (!close_after_flush_.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  const auto previous = std::exchange(last_peer_ping_, now);
  if (std::exchange(ping_strikes_reset_, false)) {
    ping_strikes_ = 0;
    return;
  }
  const std::chrono::steady_clock::duration min =
      streams_.empty() && !options_.peer_pings_without_calls
          ? std::chrono::steady_clock::duration(std::chrono::hours(2))
          : std::chrono::steady_clock::duration(options_.min_peer_ping_interval);
  if (previous && now - *previous < min) ++ping_strikes_;
  if (ping_strikes_ <= options_.max_ping_strikes) return;
  // As grpc-go and gRPC C++ servers answer: the client learns why (and grpc-go clients double
  // their keepalive time).
  static constexpr std::string_view kDebug = "too_many_pings";
  nghttp2_submit_goaway(
      session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_),
      NGHTTP2_ENHANCE_YOUR_CALM, reinterpret_cast<const uint8_t*>(kDebug.data()), kDebug.size());
  close_after_flush_ =
      fmt::format("too many PINGs from the peer (more than {} sooner than {} ms)",
                  options_.max_ping_strikes, options_.min_peer_ping_interval.count());
}

void Connection::do_read() {
  read_pending_ = true;
  transport_->async_read([self = shared_from_this()](std::error_code ec, std::string_view in) {
    self->read_pending_ = false;
    if (self->closed_) return;
    if (ec) {
      if (self->linger_) {
        self->close(self->linger_reason_, peer_went_away(ec));
        return;
      }
      self->close(ec == asio::error::eof ? std::string("the peer closed the connection")
                                         : fmt::format("read: {}", ec.message()),
                  peer_went_away(ec));
      return;
    }
    if (self->discard_input_) {
      self->do_read();  // lingering: the client's bytes are dropped until it closes
      return;
    }
    const auto bad = self->scan_.scan(in);
    if (bad) {
      // Frames before the offending one are taken as usual.
      in = in.substr(0, bad->offset);
      self->recv_error_ = fmt::format(
          "DATA or HEADERS on stream {} after the peer ended or reset it", bad->stream_id);
    }
    self->in_recv_ = true;
    auto rv = nghttp2_session_mem_recv(self->session_, reinterpret_cast<const uint8_t*>(in.data()),
                                       in.size());
    self->in_recv_ = false;
    if (self->closed_) return;
    if (rv >= 0 && bad) {
      KONN_LOG(logger(), warn, "{} HTTP/2: {}", self->options_.log_name, self->recv_error_);
      nghttp2_session_terminate_session(self->session_, NGHTTP2_STREAM_CLOSED);
      self->close_after_flush_ = "HTTP/2: " + self->recv_error_;
    } else if (rv < 0) {
      // Fatal for the session (bad preface, a flood, ...): a GOAWAY if one can still go out,
      // then the connection closes.
      const std::string reason =
          self->recv_error_.empty()
              ? fmt::format("HTTP/2: {}", nghttp2_strerror(static_cast<int>(rv)))
              : fmt::format("HTTP/2: {}", self->recv_error_);
      KONN_LOG(logger(), warn, "{} {}", self->options_.log_name, reason);
      nghttp2_session_terminate_session(self->session_, rv == NGHTTP2_ERR_FLOODED
                                                            ? NGHTTP2_ENHANCE_YOUR_CALM
                                                            : NGHTTP2_PROTOCOL_ERROR);
      self->close_after_flush_ = reason;
    }
    self->flush();
    if (!self->closed_ && self->close_after_flush_.empty() && self->wants_read() &&
        !self->read_pending_) {
      if (self->writing_ && nghttp2_session_get_outbound_queue_size(self->session_) >
                                kMaxQueuedFrames) {
        self->read_waits_for_write_ = true;  // resumed when the write completes
      } else {
        self->do_read();
      }
    }
  });
}

void Connection::release_writes() {
  if (--write_holds_ > 0 || !std::exchange(flush_wanted_, false)) return;
  flush();
}

void Connection::flush() {
  if (write_holds_ > 0) {
    flush_wanted_ = true;
    return;
  }
  if (in_recv_ || in_flush_ || writing_ || closed_ || !started_) return;
  in_flush_ = true;
  out_.clear();
  for (;;) {
    while (out_.size() < kWriteBatch) {
      const uint8_t* data = nullptr;
      const auto n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        in_flush_ = false;
        close(fmt::format("HTTP/2: {}", nghttp2_strerror(static_cast<int>(n))));
        return;
      }
      if (n == 0) break;
      out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (closed_ || drained_.empty() || out_.size() >= kWriteBatch) break;
    // A stream whose queue emptied may queue more at once (a server's last message, then its
    // status): that joins this write rather than waiting for it to complete.
    run_drained();
  }
  in_flush_ = false;
  if (closed_) return;
  // Nothing to send: an idle connection keeps no buffer from its last burst.
  if (out_.empty() && out_.capacity() > kKeptWriteBuffer) std::string().swap(out_);
  if (!out_.empty()) {
    writing_ = true;
    transport_->async_write(asio::buffer(out_),
                            [self = shared_from_this()](std::error_code ec, size_t) {
                              self->writing_ = false;
                              if (self->closed_) return;
                              if (ec) {
                                self->close(fmt::format("write: {}", ec.message()),
                                            peer_went_away(ec));
                                return;
                              }
                              self->flush();
                              if (self->read_waits_for_write_ && !self->closed_ &&
                                  !self->writing_) {
                                self->read_waits_for_write_ = false;
                                if (self->close_after_flush_.empty() && self->wants_read() &&
                                    !self->read_pending_) {
                                  self->do_read();
                                }
                              }
                            });
  }
  // Streams whose queue emptied while the batch was full may send more now.
  run_drained();
  if (writing_ || closed_) return;
  if (!close_after_flush_.empty()) {
    linger_close(close_after_flush_);
    return;
  }
  maybe_finish_shutdown();
  if (closed_ || linger_) return;
  if (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0) {
    if (goaway_received_ || shutting_down_) {
      close("");
    } else {
      linger_close("HTTP/2 session ended");  // nghttp2 ended it, its GOAWAY written
    }
  }
}

void Connection::linger_close(std::string reason) {
  if (role_ != Role::Server) {
    close(reason);
    return;
  }
  discard_input_ = true;
  if (linger_ || closed_) return;
  linger_reason_ = std::move(reason);
  keepalive_.cancel();
  end_streams(linger_reason_);  // the calls end now; only the socket lingers
  linger_ = std::make_unique<asio::steady_timer>(executor_, std::chrono::seconds(1));
  linger_->async_wait([weak = weak_from_this()](std::error_code ec) {
    if (auto self = weak.lock(); self && !ec) self->close(self->linger_reason_);
  });
  if (!read_pending_) do_read();
}

bool Connection::wants_read() {
  return nghttp2_session_want_read(session_) != 0 || (linger_ && !closed_);
}

void Connection::run_drained() {
  auto drained = std::move(drained_);
  drained_.clear();
  for (auto& s : drained) {
    if (!s->ended_ && s->queued_bytes_ == 0 && s->on_drained_) s->on_drained_();
  }
}

void Connection::maybe_finish_shutdown() {
  if (!(shutting_down_ || goaway_received_) || !streams_.empty() || writing_ || closed_ ||
      nghttp2_session_want_write(session_) != 0) {
    return;
  }
  if (!shutting_down_ && close_after_flush_.empty()) {
    // The client said it goes away and closes the connection itself. Closing at once, with what
    // it sent meanwhile unread (a PING), would reset the connection (RST) under it.
    linger_close("");
    return;
  }
  close("");
}

void Connection::post(std::function<void()> fn) {
  asio::post(executor_, [self = shared_from_this(), fn = std::move(fn)] {
    (void)self;
    fn();
  });
}

void Connection::shutdown() {
  if (closed_ || shutting_down_) return;
  shutting_down_ = true;
  const int32_t last =
      role_ == Role::Server ? nghttp2_session_get_last_proc_stream_id(session_) : 0;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, last, NGHTTP2_NO_ERROR, nullptr, 0);
  flush();
}

void Connection::end_streams(const std::string& reason) {
  auto streams = std::move(streams_);
  streams_.clear();
  const GrpcStatus st{grpc_code::kUnavailable,
                      reason.empty() ? std::string("the connection closed") : reason};
  for (auto& [id, s] : streams) s->end(st);
  for (auto& weak : std::exchange(parked_, {})) {
    if (auto s = weak.lock(); s && !s->ended_) s->end(s->pending_end_.value_or(st));
  }
}

void Connection::close(const std::string& reason, bool peer_gone) {
  if (closed_) return;
  closed_ = true;
  keepalive_.cancel();
  if (linger_) linger_->cancel();
  transport_->close();
  if (reason.empty()) {
    KONN_LOG(logger(), debug, "{} closed", options_.log_name);
  } else if (peer_gone && streams_.empty()) {
    KONN_LOG(logger(), debug, "{} closed: {}", options_.log_name, reason);
  } else {
    KONN_LOG(logger(), info, "{} closed: {}", options_.log_name, reason);
  }
  end_streams(reason);
  if (auto cb = std::move(on_close_)) cb(reason);
  on_call_ = nullptr;
  on_goaway_ = nullptr;
}

Stream* Connection::find(int32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

std::shared_ptr<Stream> Connection::start_call(const std::string& path, const Metadata& metadata,
                                               StreamCallbacks callbacks,
                                               std::optional<std::chrono::milliseconds> timeout) {
  if (role_ != Role::Client || closed_ || shutting_down_ || goaway_received_) return nullptr;
  std::vector<nghttp2_nv> nv{make_nv(":method", "POST"),
                             make_nv(":scheme", options_.scheme),
                             make_nv(":path", path),
                             make_nv(":authority", options_.authority),
                             make_nv("content-type", "application/grpc"),
                             make_nv("te", "trailers"),
                             make_nv("user-agent", options_.user_agent)};
  std::string timeout_text;
  if (timeout) {
    timeout_text = format_grpc_timeout(*timeout);
    nv.push_back(make_nv("grpc-timeout", timeout_text));
  }
  for (const auto& [k, v] : metadata) {
    if (!reserved_header(k) && k != "user-agent") nv.push_back(make_nv(k, v));
  }
  nghttp2_data_provider provider{};
  provider.read_callback = cb_read_data;
  const int32_t id =
      nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(), &provider, nullptr);
  if (id < 0) {
    KONN_LOG(logger(), warn, "{} cannot start a call to {}: {}", options_.log_name, path,
             nghttp2_strerror(id));
    return nullptr;
  }
  auto s = std::make_shared<Stream>(this, id, options_.max_message_bytes);
  s->cb_ = std::move(callbacks);
  s->data_started_ = true;
  streams_[id] = s;
  if (timeout) arm_deadline(s, *timeout);
  flush();
  return s;
}

void Connection::arm_deadline(const std::shared_ptr<Stream>& s, std::chrono::milliseconds timeout) {
  s->deadline_ = std::make_unique<asio::steady_timer>(
      executor_, std::min(timeout, std::chrono::milliseconds(kMaxTimeoutMs)));
  s->deadline_->async_wait([weak = std::weak_ptr<Stream>(s)](std::error_code ec) {
    auto stream = weak.lock();
    if (ec || !stream || stream->ended_ || stream->conn_ == nullptr) return;
    const GrpcStatus st{grpc_code::kDeadlineExceeded, "deadline exceeded"};
    if (stream->conn_->role() == Role::Server && !stream->local_end_) {
      // As gRPC servers do: the status in trailers (then a reset of the rest of the request), so
      // the client reads DEADLINE_EXCEEDED whichever side's timer fired first. Messages not yet
      // started are dropped; a message half sent is finished, so the framing stays whole.
      stream->drop_unstarted();
      stream->finish(st);
      return;
    }
    stream->local_status_ = st;
    stream->cancel();
  });
}

size_t Connection::aligned_message_limit() {
  if (role_ != Role::Server) return 0;
  return nghttp2_session_get_remote_settings(session_, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE) / 2;
}

void Connection::resume_window_deferred(int32_t stream_id) {
  auto resume = [this](Stream& s) {
    if (!s.window_deferred_) return;
    s.window_deferred_ = false;
    s.deferred_ = false;
    nghttp2_session_resume_data(session_, s.id_);
  };
  if (stream_id != 0) {
    if (Stream* s = find(stream_id)) resume(*s);
    return;
  }
  for (auto& [id, s] : streams_) resume(*s);
}

bool Connection::rejected(int32_t stream_id) {
  // Past kMaxRejectedOpen such streams are reset as any other (max_concurrent_streams bounds them
  // too: nghttp2 refuses streams beyond it).
  Stream* s = find(stream_id);
  return s != nullptr && s->rejected_ && rejected_open_ <= kMaxRejectedOpen;
}

bool Connection::recently_closed(int32_t stream_id) const {
  return std::find(recently_closed_.begin(), recently_closed_.end(), stream_id) !=
         recently_closed_.end();
}

int Connection::on_begin_frame(int32_t stream_id, uint8_t type) {
  if (closed_ || role_ != Role::Server || type != NGHTTP2_HEADERS || stream_id % 2 == 0) return 0;
  if (stream_id > max_peer_stream_id_) {
    max_peer_stream_id_ = stream_id;
    return 0;
  }
  // HEADERS on a stream id below the highest the client opened, which is neither open nor one
  // that closed lately (whose late frames HTTP/2 ignores): a stream id the client skipped, or
  // reuses long after. RFC 9113 5.1.1: a connection error (nghttp2 would ignore it).
  if (streams_.count(stream_id) != 0 || recently_closed(stream_id)) return 0;
  recv_error_ = fmt::format("HEADERS on stream {}, below the client's stream {} and not open",
                            stream_id, max_peer_stream_id_);
  return NGHTTP2_ERR_CALLBACK_FAILURE;
}

int Connection::on_begin_headers(int32_t stream_id, int cat) {
  if (closed_) return 0;
  if (role_ == Role::Server && cat == NGHTTP2_HCAT_REQUEST) {
    if (shutting_down_) {
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_REFUSED_STREAM);
      return 0;
    }
    streams_[stream_id] = std::make_shared<Stream>(this, stream_id, options_.max_message_bytes);
  }
  Stream* s = find(stream_id);
  if (s != nullptr && !s->malformed_) {
    s->check_ = HeaderBlockCheck(cat == NGHTTP2_HCAT_REQUEST    ? HeaderBlockCheck::Kind::Request
                                 : cat == NGHTTP2_HCAT_RESPONSE ? HeaderBlockCheck::Kind::Response
                                                                : HeaderBlockCheck::Kind::Trailers);
  }
  // A server keeps only the request's header block: later blocks (a client's trailers) are
  // dropped, and headers_in_ then carries the response metadata.
  if (s != nullptr && !(role_ == Role::Server && s->request_seen_)) s->headers_in_.clear();
  return 0;
}

int Connection::on_header(int32_t stream_id, std::string_view name, std::string_view value) {
  Stream* s = find(stream_id);
  if (s == nullptr || closed_ || s->malformed_ || !s->check_.add(name, value)) return 0;
  if (role_ == Role::Server && s->request_seen_) return 0;
  size_t total = name.size() + value.size();
  for (const auto& [k, v] : s->headers_in_) total += k.size() + v.size();
  if (total > kMaxHeaderBlock) {
    KONN_LOG(logger(), warn, "{} stream {}: header block over {} bytes, stream reset",
             options_.log_name, stream_id, kMaxHeaderBlock);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  s->headers_in_.emplace_back(name, value);
  return 0;
}

void Connection::finish_server_headers(Stream& s) {
  CallInfo info;
  std::string method;
  std::string content_type;
  for (auto& [k, v] : s.headers_in_) {
    if (k == ":method") {
      method = v;
    } else if (k == ":path") {
      info.path = v;
    } else if (k == ":authority") {
      info.authority = v;
    } else if (k == "content-type") {
      content_type = v;
    } else if (k == "grpc-timeout") {
      info.timeout = parse_grpc_timeout(v);
    } else if (!reserved_header(k)) {
      info.metadata.emplace_back(std::move(k), std::move(v));
    }
  }
  // Its block too: an agent's stream lives as long as the agent (a kilobyte each, issue 42).
  Metadata().swap(s.headers_in_);
  s.request_seen_ = true;
  auto stream = streams_.at(s.id_);
  const bool grpc_type =
      content_type.rfind("application/grpc", 0) == 0 &&
      (content_type.size() == 16 || content_type[16] == '+' || content_type[16] == ';');
  if (method != "POST" || !grpc_type) {
    // Not a gRPC request: an HTTP error, as gRPC servers answer.
    // One line a second at most: a peer can send these as fast as it likes.
    static core::log::RateLimit limit;
    if (uint64_t held = 0; limit.allow(&held)) {
      KONN_LOG(logger(), info,
               "{} stream {}: not a gRPC request (method {}, content-type {}){}",
               options_.log_name, s.id_, method, content_type,
               held > 0 ? fmt::format(" ({} more not logged)", held) : std::string());
    }
    const char* status = method != "POST" ? "405" : "415";
    std::vector<nghttp2_nv> nv{make_nv(":status", status)};
    s.local_status_ = GrpcStatus{grpc_code::kInternal, "not a gRPC request"};
    s.trailers_only_ = true;
    s.local_done_ = true;
    s.headers_sent_ = true;
    if (nghttp2_session_get_stream_remote_close(session_, s.id_) == 0) {
      s.rejected_ = true;
      ++rejected_open_;
    }
    nghttp2_submit_response(session_, s.id_, nv.data(), nv.size(), nullptr);
    return;
  }
  if (on_call_) {
    on_call_(stream, info);
  } else {
    stream->finish({grpc_code::kUnimplemented, "no service on this connection"});
  }
  if (info.timeout && !stream->ended_) arm_deadline(stream, *info.timeout);
  if (!stream->headers_sent_ && !stream->ended_ && !stream->cb_.on_message && !stream->cb_.on_end &&
      !stream->local_end_) {
    stream->finish({grpc_code::kUnimplemented, fmt::format("unknown method {}", info.path)});
  }
}

void Connection::finish_client_headers(Stream& s, int cat, bool end_stream) {
  Metadata md;
  std::optional<int> grpc_status;
  std::string grpc_message;
  std::optional<int> http_status;
  std::string content_type;
  for (auto& [k, v] : s.headers_in_) {
    if (k == ":status") {
      http_status = parse_int(v);
    } else if (k == "grpc-status") {
      grpc_status = parse_int(v);
      if (!grpc_status) grpc_status = grpc_code::kUnknown;
    } else if (k == "grpc-message") {
      grpc_message = percent_decode(v);
    } else if (k == "content-type") {
      content_type = v;
    } else if (!reserved_header(k)) {
      md.emplace_back(std::move(k), std::move(v));
    }
  }
  s.headers_in_.clear();
  if (cat == NGHTTP2_HCAT_RESPONSE) {
    s.response_seen_ = true;
    s.http_status_ = http_status.value_or(0);
    if (s.http_status_ != 200 && !grpc_status) {
      s.trailer_status_ =
          GrpcStatus{grpc_code_for_http(s.http_status_),
                     fmt::format("HTTP status {} without grpc-status", s.http_status_)};
      if (!end_stream) s.cancel();
      return;
    }
    if (!end_stream) {
      if (content_type.rfind("application/grpc", 0) != 0) {
        s.local_status_ =
            GrpcStatus{grpc_code::kInternal,
                       fmt::format("response content-type '{}' is not gRPC", content_type)};
        s.cancel();
        return;
      }
      if (s.cb_.on_headers) s.cb_.on_headers(md);
      return;
    }
  }
  // Trailers (or a trailers-only response).
  if (!end_stream) return;
  if (grpc_status) {
    s.trailer_status_ = GrpcStatus{*grpc_status, grpc_message};
  } else {
    s.trailer_status_ =
        GrpcStatus{grpc_code::kInternal, "the server's trailers have no grpc-status"};
  }
  if (s.decoder_.in_message()) {
    s.trailer_status_ =
        GrpcStatus{grpc_code::kInternal, "the server's stream ended in the middle of a message"};
  }
  s.trailers_in_ = std::move(md);  // handed to on_end
  s.trailers_ready_ = true;
}

int Connection::on_frame_recv(const void* f) {
  const auto* frame = static_cast<const nghttp2_frame*>(f);
  if (closed_) return 0;
  const bool end_stream = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
  switch (frame->hd.type) {
    case NGHTTP2_HEADERS: {
      Stream* s = find(frame->hd.stream_id);
      if (s == nullptr || s->malformed_) return 0;
      if (!s->check_.finish(end_stream)) {
        reset_malformed(*s, s->check_.error());
        return 0;
      }
      if (role_ == Role::Server && s->check_.kind() == HeaderBlockCheck::Kind::Request) {
        s->content_length_ = s->check_.content_length();
      }
      if (role_ == Role::Server && end_stream && s->content_length_ &&
          *s->content_length_ != s->data_received_) {
        reset_malformed(*s, fmt::format("content-length {} but {} bytes of DATA",
                                        *s->content_length_, s->data_received_));
        return 0;
      }
      if (role_ == Role::Server && s->rejected_) return 0;
      if (role_ == Role::Server) {
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) finish_server_headers(*s);
        s = find(frame->hd.stream_id);
        if (s != nullptr && end_stream) {
          s->remote_ended_ = true;
          s->deliver();
        }
      } else {
        finish_client_headers(*s, frame->headers.cat, end_stream);
        if (end_stream) end_client_request(frame->hd.stream_id);
      }
      break;
    }
    case NGHTTP2_DATA: {
      Stream* s = find(frame->hd.stream_id);
      if (s != nullptr && s->malformed_) return 0;
      if (s != nullptr && end_stream && role_ == Role::Server && s->content_length_ &&
          *s->content_length_ != s->data_received_) {
        reset_malformed(*s, fmt::format("content-length {} but {} bytes of DATA",
                                        *s->content_length_, s->data_received_));
        return 0;
      }
      if (s != nullptr && end_stream && role_ == Role::Server && s->rejected_) return 0;
      if (s != nullptr && end_stream) {
        s->remote_ended_ = true;
        if (role_ == Role::Server) {
          s->deliver();
        } else if (!s->trailer_status_) {
          s->trailer_status_ =
              GrpcStatus{grpc_code::kInternal,
                         "the server ended the stream without trailers (no grpc-status)"};
        }
        if (role_ == Role::Client) end_client_request(frame->hd.stream_id);
      }
      break;
    }
    case NGHTTP2_SETTINGS:
      if ((frame->hd.flags & NGHTTP2_FLAG_ACK) == 0) {
        peer_settings_received_ = true;
        resume_window_deferred(0);  // the initial window may have grown
      }
      break;
    case NGHTTP2_WINDOW_UPDATE:
      resume_window_deferred(frame->hd.stream_id);
      break;
    case NGHTTP2_PING:
      if ((frame->hd.flags & NGHTTP2_FLAG_ACK) == 0 && role_ == Role::Server &&
          options_.min_peer_ping_interval.count() > 0) {
        police_peer_ping();
      }
      if ((frame->hd.flags & NGHTTP2_FLAG_ACK) != 0 && ping_outstanding_) {
        ping_outstanding_ = false;
        keepalive_.expires_after(options_.keepalive_interval);
        keepalive_.async_wait([weak = weak_from_this()](std::error_code ec) {
          if (auto self = weak.lock(); self && !ec) self->keepalive_tick();
        });
      }
      break;
    case NGHTTP2_GOAWAY: {
      goaway_received_ = true;
      const auto code = frame->goaway.error_code;
      if (code != NGHTTP2_NO_ERROR) {
        KONN_LOG(logger(), warn, "{} peer sent GOAWAY: {} (last stream {})", options_.log_name,
                 nghttp2_http2_strerror(code), frame->goaway.last_stream_id);
      }
      if (on_goaway_) on_goaway_(frame->goaway.last_stream_id, code);
      break;
    }
    default:
      break;
  }
  return 0;
}

void Connection::reset_malformed(Stream& s, const std::string& why) {
  KONN_LOG(logger(), warn, "{} stream {}: malformed: {}; stream reset (PROTOCOL_ERROR)",
           options_.log_name, s.id_, why);
  s.malformed_ = true;
  if (!s.local_status_) s.local_status_ = GrpcStatus{grpc_code::kInternal, "malformed: " + why};
  if (s.rejected_) {
    s.rejected_ = false;
    --rejected_open_;
  }
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id_, NGHTTP2_PROTOCOL_ERROR);
}

void Connection::end_client_request(int32_t stream_id) {
  if (nghttp2_session_get_stream_local_close(session_, stream_id) != 0) return;
  // A client that already half-closed with nothing left to send (its END_STREAM waits for the
  // next write, as when a reaction to the server's last message did it) ends its side with that
  // END_STREAM: no reset. A server counts its clients' resets (nghttp2's rapid-reset limit: past
  // 1000 at more than 33 a second it closes the connection), and a client that opens a call per
  // tunnel on one connection would otherwise send one per tunnel.
  if (Stream* s = find(stream_id); s != nullptr && s->local_end_ && s->queued_bytes_ == 0) return;
  // The response is complete: what the client still had to send is abandoned, with a
  // RST_STREAM(NO_ERROR), as gRPC clients do; the stream then closes with the server's status.
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_NO_ERROR);
}

int Connection::on_data_chunk(int32_t stream_id, const uint8_t* data, size_t len) {
  Stream* s = find(stream_id);
  if (s == nullptr || closed_ || s->ended_ || s->malformed_) {
    // A stream we no longer read: its bytes still count against the connection window.
    if (!closed_) nghttp2_session_consume(session_, stream_id, len);
    return 0;
  }
  if (role_ == Role::Server) {
    s->data_received_ += len;
    if (s->content_length_ && s->data_received_ > *s->content_length_) {
      nghttp2_session_consume(session_, stream_id, len);
      reset_malformed(*s, fmt::format("more DATA than its content-length {}", *s->content_length_));
      return 0;
    }
    if (s->rejected_) {
      // The answer went; the rest of the request is dropped, up to a bound.
      nghttp2_session_consume(session_, stream_id, len);
      if (s->data_received_ > kMaxRejectedBody) {
        s->rejected_ = false;
        --rejected_open_;
        nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_NO_ERROR);
      }
      return 0;
    }
  }
  if (role_ == Role::Client && !s->response_seen_) {
    nghttp2_session_consume(session_, stream_id, len);
    return 0;
  }
  s->on_data(data, len);
  return 0;
}

int Connection::on_stream_close(int32_t stream_id, uint32_t error_code) {
  if (role_ == Role::Server) {
    recently_closed_[closed_next_] = stream_id;
    closed_next_ = (closed_next_ + 1) % recently_closed_.size();
  }
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return 0;
  auto s = it->second;
  streams_.erase(it);
  if (s->rejected_) --rejected_open_;
  if (s->unconsumed_ > 0 && !closed_) {
    nghttp2_session_consume_connection(session_, s->unconsumed_);
  }
  s->unconsumed_ = 0;
  s->h2_closed_ = true;
  GrpcStatus st;
  if (s->local_status_) {
    st = *s->local_status_;
  } else if (role_ == Role::Client) {
    if (s->trailer_status_ &&
        (s->trailers_ready_ || error_code == NGHTTP2_NO_ERROR || s->http_status_ != 200)) {
      st = *s->trailer_status_;
    } else if (error_code != NGHTTP2_NO_ERROR) {
      st = status_for_reset(error_code);
    } else {
      st = {grpc_code::kInternal, "the stream closed without a grpc-status"};
    }
  } else if (s->local_done_) {
    st = s->finish_status_;
  } else if (error_code != NGHTTP2_NO_ERROR) {
    st = status_for_reset(error_code);
  } else {
    st = {grpc_code::kCancelled, "the stream closed before the server finished"};
  }
  if (role_ == Role::Server) {
    // The call is over (the client reset it, or the exchange is complete): what a paused stream
    // still holds is moot, and its owner learns of the end now, as gRPC servers tell theirs
    // whether they read or not.
    s->end(st);
    return 0;
  }
  s->pending_end_ = st;
  s->deliver();
  // A paused stream ends when the application resumes it; until then it is parked here, so a
  // closing connection can still end it.
  if (!s->ended_) {
    std::erase_if(parked_, [](const std::weak_ptr<Stream>& w) {
      auto p = w.lock();
      return !p || p->ended_;
    });
    parked_.push_back(s);
  }
  return 0;
}

ssize_t Connection::read_data(int32_t stream_id, uint8_t*, size_t length, uint32_t* flags) {
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return 0;
  }
  Stream& s = *it->second;
  if (s.aborted_) {
    // The trailers went without the data provider (abort): it has nothing more to give.
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    return 0;
  }
  // The frame's bytes are copied from the send queue straight into the write buffer by
  // send_data(), which nghttp2 calls next, not into nghttp2's frame buffer first.
  size_t n = std::min(length, s.queued_bytes_);
  if (role_ == Role::Server && n > 0) {
    n = aligned_take(s, n);
    if (n == 0) {
      // The next message does not fit the peer's windows whole: it waits for a WINDOW_UPDATE
      // (resume_window_deferred) rather than going in part.
      s.deferred_ = true;
      s.window_deferred_ = true;
      return NGHTTP2_ERR_DEFERRED;
    }
  }
  if (n > 0) *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (n == s.queued_bytes_) {  // the queue empties with this frame
    if (s.local_end_) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      s.local_done_ = true;
      if (role_ == Role::Server) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        const std::string code = std::to_string(s.finish_status_.code);
        const std::string message = percent_encode(s.finish_status_.message);
        std::vector<nghttp2_nv> nv{make_nv("grpc-status", code)};
        if (!message.empty()) nv.push_back(make_nv("grpc-message", message));
        for (const auto& [k, v] : s.finish_trailers_) nv.push_back(make_nv(k, v));
        nghttp2_submit_trailer(session_, stream_id, nv.data(), nv.size());
      }
    } else if (n == 0) {
      s.deferred_ = true;
      return NGHTTP2_ERR_DEFERRED;
    }
  }
  return static_cast<ssize_t>(n);
}

size_t Connection::aligned_take(const Stream& s, size_t n) {
  const size_t limit = aligned_message_limit();
  const int64_t window = std::max<int64_t>(
      0, std::min(nghttp2_session_get_stream_remote_window_size(session_, s.id_),
                  nghttp2_session_get_remote_window_size(session_)));
  size_t take = 0;
  size_t offset = s.out_offset_;
  for (const auto& m : s.outbox_) {
    const size_t left = m.size() - offset;
    const bool begun = offset > 0;
    offset = 0;
    // A message is begun only when the windows take all of it (one over the limit goes as they
    // allow); one already begun is finished, the windows having had room for it.
    if (!begun && left <= limit && static_cast<int64_t>(take + left) > window) break;
    take += left;
    if (take >= n) return n;
  }
  return take;
}

int Connection::send_data(const void* f, const uint8_t* framehd, size_t length) {
  const auto* frame = static_cast<const nghttp2_frame*>(f);
  auto it = streams_.find(frame->hd.stream_id);
  // read_data() has just measured `length` from this stream's queue, and nothing ran since.
  if (it == streams_.end() || it->second->queued_bytes_ < length) {
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  Stream& s = *it->second;
  const size_t padlen = frame->data.padlen;
  const size_t frame_bytes = 9 + padlen + length;
  if (out_.size() + frame_bytes > out_.capacity()) {
    // Room for a whole batch at once, so a burst does not grow (and move) the buffer frame by
    // frame; it is dropped again when the connection goes idle (flush()).
    out_.reserve(std::max(out_.size() + frame_bytes, kWriteBatch + frame_bytes));
  }
  out_.append(reinterpret_cast<const char*>(framehd), 9);
  if (padlen > 0) out_.push_back(static_cast<char>(padlen - 1));
  size_t n = 0;
  while (n < length) {
    const Stream::Outgoing& front = s.outbox_.front();
    const bool in_owned = s.out_offset_ < front.owned.size();
    const std::string_view part =
        in_owned ? std::string_view(front.owned).substr(s.out_offset_)
                 : front.borrowed.substr(s.out_offset_ - front.owned.size());
    const size_t take = std::min(length - n, part.size());
    out_.append(part.data(), take);
    n += take;
    s.out_offset_ += take;
    if (s.out_offset_ == front.size()) {
      s.outbox_.pop_front();
      s.out_offset_ = 0;
    }
  }
  if (padlen > 1) out_.append(padlen - 1, '\0');
  s.queued_bytes_ -= length;
  if (s.outbox_.empty() && length > 0 && s.on_drained_) drained_.push_back(it->second);
  // A full batch goes out before nghttp2 packs another frame (flush() writes it), but not in the
  // middle of a message that is sent whole (aligned_message_limit): a peer that stops reading
  // would otherwise hold the rest of it back, and an abort could only cut it.
  if (out_.size() < kWriteBatch) return 0;
  const bool mid_aligned = s.out_offset_ > 0 && !s.outbox_.empty() &&
                           s.outbox_.front().size() <= aligned_message_limit();
  return mid_aligned ? 0 : NGHTTP2_ERR_PAUSE;
}

}  // namespace konn::core::h2
