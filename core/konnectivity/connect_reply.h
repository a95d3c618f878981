#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/http/http1_parser.h"

namespace konn::core::konnectivity {

// The request head of an HTTP CONNECT to a proxy-server for `address` ("host:port").
std::string connect_request(const std::string& address);

// Reads a proxy-server's answer to CONNECT, sans-I/O: the head through core/http, then (only for
// an answer other than 200) its body, which carries the reason ("dial tcp ...: connection
// refused"). Feed bytes as they arrive, in pieces of any size.
class ConnectReply {
 public:
  enum class Status {
    NeedMore,     // feed more bytes (or finish() at EOF)
    Established,  // exactly 200: the tunnel is open; leftover() holds tunnel bytes already read
    Failed,       // any other status; status(), reason() and body() tell why
    Invalid,      // not an HTTP response; error() says why
  };

  // Bodies of refusals are kept up to this size (the reason is one line).
  static constexpr size_t kMaxBody = 4096;

  Status feed(std::string_view data);
  // The proxy-server closed the connection: a body delimited by EOF is complete.
  Status finish();

  int status() const { return parser_.head().status; }
  const std::string& reason() const { return parser_.head().reason; }
  const std::string& body() const { return body_; }
  const std::string& leftover() const { return leftover_; }
  const std::string& error() const { return error_; }
  // "<status> <reason>: <body>" with the body's trailing newline trimmed.
  std::string describe() const;

 private:
  Status body_status();

  http::Http1Parser parser_{http::Http1Parser::Kind::Response, 64 * 1024};
  bool head_done_ = false;
  bool no_body_set_ = false;
  std::string body_;
  std::string leftover_;
  std::string error_;
};

}  // namespace konn::core::konnectivity
