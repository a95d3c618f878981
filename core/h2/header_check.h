#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace konn::core::h2 {

// The checks one received header block must pass (RFC 9113 8.1-8.3), made by this library
// instead of nghttp2's HTTP messaging checks, which are off (nghttp2_option_set_no_http_messaging):
// nghttp2 refuses an `:authority` that is not an RFC 3986 authority, and grpc-go before 1.28
// (kube-apiserver 1.20) sends the unix socket path it dialled there. Each check and its reason
// is listed in core/h2/README.md ("Header checks"). Fields come one at a time, in order.
class HeaderBlockCheck {
 public:
  enum class Kind {
    Request,   // a server's first block of a stream
    Response,  // a client's first block of a stream
    Trailers,  // any later block
  };

  HeaderBlockCheck() = default;
  explicit HeaderBlockCheck(Kind kind) : kind_(kind) {}

  // One field. False once the block is malformed (error() says why); later fields are not
  // checked.
  bool add(std::string_view name, std::string_view value);
  // The block ended (`end_stream`: it carried END_STREAM). False when it is malformed.
  bool finish(bool end_stream);

  Kind kind() const { return kind_; }
  bool malformed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  // A request's content-length, when it sent one.
  std::optional<uint64_t> content_length() const { return content_length_; }
  // A request's :method (empty when absent).
  const std::string& method() const { return method_; }

 private:
  bool fail(std::string why);

  Kind kind_ = Kind::Request;
  std::string error_;
  uint8_t pseudo_seen_ = 0;  // bits of kPseudo* below
  bool regular_seen_ = false;
  std::string method_;
  std::optional<uint64_t> content_length_;
};

// The frame heads of what the peer sends, read before nghttp2 reads the bytes. nghttp2 keeps no
// state for closed streams here (nghttp2_option_set_no_closed_streams: with an unbounded
// concurrent-stream limit it kept every closed stream for the connection's life), so it drops a
// DATA or HEADERS frame on a stream the peer already ended or reset without a word; RFC 9113 5.1
// makes that STREAM_CLOSED. FrameScan remembers the last streams the peer ended (END_STREAM) or
// reset (RST_STREAM) and finds such a frame. CONTINUATION, WINDOW_UPDATE, PRIORITY and
// RST_STREAM stay allowed there.
class FrameScan {
 public:
  // `preface`: bytes before the first frame (a server reads the client's 24-byte preface).
  explicit FrameScan(size_t preface) : skip_(preface) {}

  struct Violation {
    size_t offset;  // where in the bytes given the frame's head starts (0: in an earlier read)
    int32_t stream_id;
  };
  // Reads the frame heads in the next bytes of the connection; the first frame that breaks the
  // rule, if any (nothing after it is read).
  std::optional<Violation> scan(std::string_view in);

 private:
  bool ended(int32_t id) const;

  size_t skip_;  // bytes until the next frame head
  uint8_t head_[9] = {};
  size_t have_ = 0;  // bytes of head_ read so far
  std::array<int32_t, 64> ended_{};  // a ring of the streams the peer ended or reset
  size_t next_ = 0;
};

}  // namespace konn::core::h2
