#pragma once

#include <cstdint>
#include <string>

namespace konn::testsupport {

struct HttpAnswer {
  int status = 0;  // 0: no answer
  std::string body;
};

// GET http://127.0.0.1:<port><path>: one request, Connection: close, read until the daemon
// closes (so the connection is gone when this returns); the body de-chunked.
HttpAnswer http_get_local(uint16_t port, const std::string& path);

}  // namespace konn::testsupport
