#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "test-client/byte_stream.h"

namespace konn::testclient {

struct HttpGetResult {
  std::string error;  // why no complete response arrived; empty on success
  int code = 0;       // HTTP status code
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
  std::string body;
};

// A minimal HTTP/1.1 GET over an established stream (a tunnel or a CONNECT connection): sends
// "GET <path> HTTP/1.1" with "Host: <host_header>" and "Connection: close", then reads and parses
// the response (Content-Length, chunked, or until the stream ends) within `timeout`. Does not
// close the stream.
HttpGetResult http_get(ByteStream& tunnel, const std::string& host_header, const std::string& path,
                       std::chrono::milliseconds timeout);

}  // namespace konn::testclient
