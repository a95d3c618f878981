#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace konn::testclient {

// Incremental, sans-I/O parser of one HTTP/1.x response to a GET: status line, headers, and a
// body framed by Content-Length, chunked transfer coding, or the end of the connection. Bytes may
// arrive in any split. Limits: 64 KiB of head; 1xx interim responses are skipped.
class HttpResponseParser {
 public:
  enum class Status { NeedMore, Complete, Invalid };

  // Consumes `bytes`. Bytes after a complete response are ignored.
  Status feed(std::string_view bytes);
  // The connection ended: completes a body framed by the connection's end; anything else still
  // incomplete becomes Invalid.
  Status finish();

  Status status() const { return status_; }
  // Why the response is Invalid.
  const std::string& error() const { return error_; }

  int code() const { return code_; }
  const std::string& reason() const { return reason_; }
  // Header names lowercased, values trimmed, in arrival order.
  const std::vector<std::pair<std::string, std::string>>& headers() const { return headers_; }
  // The first value of `name` (lowercase), or "".
  std::string header(std::string_view name) const;
  const std::string& body() const { return body_; }

 private:
  enum class Phase { Head, Body, ChunkSize, ChunkData, ChunkDataEnd, Trailers, UntilEof, Done };

  Status fail(std::string why);
  bool parse_head(std::string_view head);
  void run();

  Phase phase_ = Phase::Head;
  Status status_ = Status::NeedMore;
  std::string error_;
  std::string buf_;         // unconsumed input
  uint64_t remaining_ = 0;  // body or chunk bytes still expected
  int code_ = 0;
  std::string reason_;
  std::vector<std::pair<std::string, std::string>> headers_;
  std::string body_;
};

}  // namespace konn::testclient
