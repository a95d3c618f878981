#pragma once

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

}  // namespace konn::core::h2
