#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace konn::core::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

// The head of one HTTP/1.x message, request or response.
struct MessageHead {
  // Request: method ("GET", "CONNECT", ...) and request target as sent ("/api?watch=1",
  // "host:443" for CONNECT). Response: status and reason.
  std::string method;
  std::string target;
  int status = 0;
  std::string reason;
  int version_major = 1;
  int version_minor = 1;
  Headers headers;  // in arrival order, names as sent

  // Body framing as the parser determined it.
  bool chunked = false;                       // Transfer-Encoding: chunked
  std::optional<uint64_t> content_length;     // Content-Length, when present
  bool keep_alive = true;                     // connection may carry another message
  bool upgrade = false;                       // Upgrade requested/accepted, or CONNECT

  // First value of header `name` (case-insensitive), or nullptr.
  const std::string* find(std::string_view name) const;
  // Whether a comma-separated header (Connection, Upgrade, ...) contains `token`
  // (case-insensitive), across all its occurrences.
  bool has_token(std::string_view name, std::string_view token) const;
};

// Case-insensitive ASCII comparison.
bool iequals(std::string_view a, std::string_view b);

// Sans-I/O, incremental HTTP/1.1 message parser (http-parser underneath). Bytes go in with feed()
// in pieces of any size; the parser reports the head once, then body bytes (de-chunked) as views
// into the caller's input, then the end of the message. It never reads a socket and never copies
// body bytes.
//
// Safety rules applied to every message (request smuggling, RFC 9112 section 6.3):
//  - Content-Length together with Transfer-Encoding is rejected.
//  - Differing repeated Content-Length values are rejected.
//  - Transfer-Encoding other than a final "chunked" is rejected on requests.
//  - A head larger than `max_head_bytes` is rejected with status 431.
class Http1Parser {
 public:
  enum class Kind { Request, Response };
  enum class Status {
    NeedMore,         // every byte consumed; feed more
    MessageComplete,  // the message ended at `consumed`; bytes after it belong to the next one
    Invalid,          // malformed or unsafe input; see error() and error_status()
  };
  struct Result {
    Status status = Status::NeedMore;
    size_t consumed = 0;                   // bytes of the input used by this call
    bool head_complete = false;            // the head became available during this call
    std::vector<std::string_view> body;    // de-chunked body pieces, views into the input
  };

  explicit Http1Parser(Kind kind, size_t max_head_bytes = 1 << 20);
  ~Http1Parser();
  Http1Parser(const Http1Parser&) = delete;
  Http1Parser& operator=(const Http1Parser&) = delete;

  // Parses as much of `data` as belongs to the current message. After MessageComplete, call
  // reset() before feeding the next message; after Invalid the parser stays failed. For an
  // upgrade (101 response, or a request with Upgrade/CONNECT), the message completes at the end
  // of its head and the remaining bytes are the new protocol's.
  Result feed(std::string_view data);

  // Tells a response parser that the message has no body whatever its headers say (the answer to
  // a HEAD request). Call before feeding the response.
  void expect_no_body(bool no_body) { no_body_ = no_body; }

  // The peer closed the connection. For a response delimited by end of stream this completes the
  // message (returns true); anywhere else mid-message it is an error (returns false).
  bool finish();

  // Starts over for the next message on the same connection.
  void reset();

  bool head_ready() const { return head_ready_; }
  const MessageHead& head() const { return head_; }
  MessageHead& head() { return head_; }
  // True before any byte of the current message was seen.
  bool idle() const { return bytes_seen_ == 0; }

  const std::string& error() const { return error_; }
  // The status to answer an Invalid request with: 400, or 431 for an oversized head.
  int error_status() const { return error_status_; }

 private:
  struct Impl;
  friend struct Impl;

  bool on_head_complete();
  void fail(int status, std::string text);

  Kind kind_;
  size_t max_head_bytes_;
  std::unique_ptr<Impl> impl_;
  MessageHead head_;
  std::string field_;      // header name being assembled
  bool in_value_ = false;  // last header callback was a value
  bool head_ready_ = false;
  bool complete_ = false;
  bool no_body_ = false;
  bool failed_ = false;
  size_t head_bytes_ = 0;
  size_t bytes_seen_ = 0;
  std::vector<std::string_view>* body_out_ = nullptr;
  std::string error_;
  int error_status_ = 400;
};

}  // namespace konn::core::http
