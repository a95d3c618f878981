#include "core/tunnel/h2_server_stream.h"

#include <algorithm>

#include "core/tunnel/packet.h"

namespace konn::core::tunnel {
namespace {

// A Packet's framing around its DATA payload: the gRPC prefix and the protobuf fields.
constexpr size_t kFramingSlack = 64;

}  // namespace

void H2ServerStream::attach(asio::io_context& home, const std::shared_ptr<h2::Stream>& stream) {
  home_ = &home;
  stream_ = stream;
  stream_id_ = stream->id();
  h2::StreamCallbacks cb;
  cb.on_message = [this](std::string&& m) { on_message(std::move(m)); };
  cb.on_half_close = [this] { on_half_close(); };
  cb.on_end = [this](const h2::GrpcStatus& st, const h2::Metadata&) { on_stream_end(st); };
  stream->set_callbacks(std::move(cb));
  stream->set_on_drained([this] {
    if (!write_outstanding_) return;
    write_outstanding_ = false;
    handle_write_done(true);
  });
  // Paused until the first read: a message that comes before is held by HTTP/2.
  stream->pause_reading();
}

void H2ServerStream::send_headers(h2::Metadata md) {
  on_home_thread([this, md = std::move(md)] {
    if (stream_over_) return;
    auto stream = stream_;  // its end may come inside
    stream->send_headers(md);
  });
}

void H2ServerStream::start_write_op(const Packet* p, WriteOptions) {
  on_home_thread([this, p] {
    if (stream_over_) {
      handle_write_done(false);
      return;
    }
    write_packet(p);
  });
}

void H2ServerStream::write_packet(const Packet* p) {
  // A DATA payload goes from the packet into the connection's write buffer: the packet stays in
  // PacketStream's hands until this write is done (on_drained, or the stream's end).
  FramedPacket framed = frame_packet(*p);
  write_outstanding_ = true;
  auto stream = stream_;  // its end may come inside
  // Merged DATA stays within what the peer's window takes whole (h2's message-aligned sending),
  // so that a call aborted while the peer does not read ends between messages.
  if (const size_t whole = stream->aligned_message_limit(); whole > 2 * kFramingSlack) {
    set_coalesce_limit(std::min(kCoalesceLimit, whole - kFramingSlack));
  }
  if (!stream->send_framed(std::move(framed.head), framed.payload)) {
    write_outstanding_ = false;
    handle_write_done(false);
  }
  // Otherwise done once HTTP/2 took its bytes (on_drained), which may already have happened.
}

void H2ServerStream::start_read_op(Packet* p) {
  on_home_thread([this, p] {
    if (stream_over_ || read_ended_) {
      handle_read_done(false);
      return;
    }
    read_target_ = p;
    if (held_) {
      // Delivered from the loop, not from inside this call: the read that follows it starts
      // from the delivery, and must not nest in this one.
      asio::post(*home_, [this, keep = shared_from_this()] {
        if (!held_ || read_target_ == nullptr || stream_over_) return;
        std::string m = std::move(*held_);
        held_.reset();
        on_message(std::move(m));
        if (!held_ && read_target_ != nullptr && !stream_over_) {
          auto stream = stream_;  // its end may come inside
          stream->resume_reading();
        }
      });
      return;
    }
    if (stream_->reading_paused()) {
      auto stream = stream_;  // its end may come inside
      stream->resume_reading();
    }
  });
}

void H2ServerStream::start_finish_op(const h2::GrpcStatus& status) {
  on_home_thread([this, status] {
    if (!stream_over_ && !status_sent_) {
      status_sent_ = status.code;
      // The call is over for us: what the peer still sends is dropped, and a stream paused
      // before its first read (a refused agent) takes in nothing more.
      discarding_ = true;
      held_.reset();
      auto stream = stream_;  // its end may come inside
      stream->finish(status);
      if (!stream_over_ && stream->reading_paused()) stream->resume_reading();
    }
    settle();
  });
}

void H2ServerStream::cancel_op(const h2::GrpcStatus& status) {
  cancelled_by_us_ = true;
  on_home_thread([this, status] { abort_call(status); });
}

void H2ServerStream::abort_call(const h2::GrpcStatus& status) {
  if (stream_over_) return;
  // What the peer still sends is dropped.
  discarding_ = true;
  held_.reset();
  auto stream = stream_;  // its end may come inside
  const h2::GrpcStatus st =
      status.ok() ? h2::GrpcStatus{h2::grpc_code::kCancelled, "cancelled"} : status;
  if (!status_sent_) status_sent_ = st.code;
  stream->abort(st);
  if (!stream_over_) stream->resume_reading();
}

void H2ServerStream::on_message(std::string&& message) {
  if (discarding_) return;
  if (read_target_ == nullptr) {
    // No read outstanding (reading is paused): keep it, and let HTTP/2 flow control hold the rest.
    held_ = std::move(message);
    stream_->pause_reading();
    return;
  }
  if (!read_target_->ParseFromString(message)) {
    // As gRPC servers do with a message they cannot parse: the call ends INTERNAL (the peer's
    // fault, not our own cancel: it counts as a stream error).
    abort_call({h2::grpc_code::kInternal,
                "a message is not a Packet (" + std::to_string(message.size()) + " bytes)"});
    fail_read();
    return;
  }
  read_target_ = nullptr;
  handle_read_done(true);
}

void H2ServerStream::fail_read() {
  if (read_target_ == nullptr) return;
  read_target_ = nullptr;
  handle_read_done(false);
}

void H2ServerStream::on_half_close() {
  // The peer sends nothing more: the read side ends (after the messages before it).
  read_ended_ = true;
  fail_read();
}

void H2ServerStream::on_stream_end(const h2::GrpcStatus& status) {
  if (stream_over_) return;
  stream_over_ = true;
  held_.reset();
  peer_cancelled_ = !(status_sent_ && *status_sent_ == status.code);
  fail_read();
  if (write_outstanding_) {
    write_outstanding_ = false;
    handle_write_done(false);
  }
  close(status);
  settle();
}

void H2ServerStream::settle() {
  if (--holds_ == 0) {
    stream_.reset();
    call_over();
  }
}

}  // namespace konn::core::tunnel
