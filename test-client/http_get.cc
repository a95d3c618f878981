#include "test-client/http_get.h"

#include "test-client/http_response_parser.h"

namespace konn::testclient {

HttpGetResult http_get(ByteStream& tunnel, const std::string& host_header, const std::string& path,
                       std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + timeout;
  HttpGetResult result;
  std::string request = "GET " + (path.empty() || path.front() != '/' ? "/" + path : path) +
                        " HTTP/1.1\r\nHost: " + host_header +
                        "\r\nUser-Agent: proxy-test-client\r\nAccept: */*\r\nConnection: "
                        "close\r\n\r\n";
  if (!tunnel.write(request)) {
    result.error = "could not send the request: " + tunnel.end_reason();
    return result;
  }
  HttpResponseParser parser;
  std::string chunk;
  while (parser.status() == HttpResponseParser::Status::NeedMore) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      result.error = "no complete response within " + std::to_string(timeout.count()) + "ms";
      return result;
    }
    switch (tunnel.read_for(&chunk, left)) {
      case ByteStream::ReadStatus::Data:
        parser.feed(chunk);
        break;
      case ByteStream::ReadStatus::Eof:
        parser.finish();
        break;
      case ByteStream::ReadStatus::Timeout:
        break;
    }
  }
  if (parser.status() == HttpResponseParser::Status::Invalid) {
    result.error = parser.error();
    if (!tunnel.end_reason().empty()) result.error += " (stream: " + tunnel.end_reason() + ")";
    return result;
  }
  result.code = parser.code();
  result.headers = parser.headers();
  result.body = parser.body();
  return result;
}

}  // namespace konn::testclient
