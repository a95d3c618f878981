#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace konn::core::h2 {

// gRPC's length-prefixed message framing (the body of a gRPC HTTP/2 stream): a 1-byte compressed
// flag, a 4-byte big-endian length, then that many payload bytes. Sans-I/O: the decoder takes the
// bytes of DATA frames in any split; the encoder returns the 5-byte prefix to send before a
// payload.

inline constexpr size_t kGrpcPrefixBytes = 5;
// The largest message konn accepts or sends, as the daemons' gRPC servers allow (16 MiB).
inline constexpr size_t kMaxMessageBytes = 16 * 1024 * 1024;

// The prefix of one uncompressed message of `payload_size` bytes (at most 2^32 - 1).
std::array<char, kGrpcPrefixBytes> grpc_prefix(size_t payload_size);
// Prefix and payload in one string (tests, small messages).
std::string grpc_frame(std::string_view payload);

// Incremental decoder of one stream's messages. Feed bytes with decode() until it says Complete
// (take the message, then feed the rest) or Invalid (the stream must be failed with
// grpc_status() and error(); the decoder stays failed).
class GrpcMessageDecoder {
 public:
  enum class Status {
    NeedMore,  // every byte consumed, no message completed yet
    Complete,  // a message completed after `consumed` bytes; take_message() returns it
    Invalid,   // the framing is broken or not allowed: see error()
  };
  struct Result {
    Status status;
    size_t consumed;  // bytes of the input taken (never more than its size)
  };

  explicit GrpcMessageDecoder(size_t max_message_bytes = kMaxMessageBytes)
      : max_message_bytes_(max_message_bytes) {}

  // Takes bytes up to the end of the next message. After Complete, call take_message() before
  // decoding further: the next decode() starts a new message.
  Result decode(std::string_view input);
  // The message of the last Complete result (moved out).
  std::string take_message() { return std::move(message_); }

  // True when some bytes of a message were taken but the message is not complete: a stream that
  // ends here ends mid-message.
  bool in_message() const { return prefix_have_ > 0; }
  // Bytes of the incomplete message held (prefix included); 0 between messages.
  size_t partial_bytes() const {
    return prefix_have_ + (prefix_have_ == kGrpcPrefixBytes ? message_.size() : 0);
  }
  bool failed() const { return !error_.empty(); }
  // Why the last decode() was Invalid (empty while not failed).
  const std::string& error() const { return error_; }
  // The gRPC status code to fail the stream with: RESOURCE_EXHAUSTED (8) for a message over the
  // limit, INTERNAL (13) for a compressed or malformed one.
  int grpc_status() const { return grpc_status_; }

 private:
  Result fail(int status, std::string text);

  size_t max_message_bytes_;
  std::array<unsigned char, kGrpcPrefixBytes> prefix_{};
  size_t prefix_have_ = 0;  // prefix bytes taken of the current message (0..5)
  size_t length_ = 0;       // payload length, once the prefix is complete
  std::string message_;     // payload bytes taken so far
  std::string error_;
  int grpc_status_ = 0;
};

}  // namespace konn::core::h2
