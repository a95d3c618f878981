#include "test-client/http_get.h"

#include <algorithm>
#include <cctype>
#include <string_view>

#include "core/http/http1_parser.h"

namespace konn::testclient {
namespace {

using core::http::Http1Parser;

// A response head larger than this is refused: the client fetches small health pages.
constexpr size_t kMaxResponseHead = 64 * 1024;

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

// The final response on one connection, read with core/http's parser: interim 1xx responses
// (other than 101) are skipped, as a client that sent no Expect must.
class ResponseReader {
 public:
  enum class State { Reading, Complete, Invalid };

  State feed(std::string_view data) {
    while (state_ == State::Reading && !data.empty()) {
      auto r = parser_.feed(data);
      for (auto piece : r.body) body_.append(piece);
      if (r.status == Http1Parser::Status::Invalid) return fail(parser_.error());
      data.remove_prefix(r.consumed);
      if (r.status == Http1Parser::Status::MessageComplete) {
        int status = parser_.head().status;
        if (status >= 100 && status < 200 && status != 101) {
          parser_.reset();  // interim: the final response follows
          body_.clear();
          continue;
        }
        state_ = State::Complete;
      } else if (r.consumed == 0) {
        break;  // NeedMore consumes everything; never spin
      }
    }
    return state_;
  }

  // The stream ended: completes a body delimited by the end of the connection.
  State finish() {
    if (state_ != State::Reading) return state_;
    if (parser_.finish()) {
      state_ = State::Complete;
      return state_;
    }
    return fail(parser_.idle() ? "connection ended before the response head"
                               : "connection ended inside the response: " + parser_.error());
  }

  State state() const { return state_; }
  const std::string& error() const { return error_; }
  const core::http::MessageHead& head() const { return parser_.head(); }
  std::string& body() { return body_; }

 private:
  State fail(std::string why) {
    state_ = State::Invalid;
    error_ = "bad response: " + std::move(why);
    return state_;
  }

  Http1Parser parser_{Http1Parser::Kind::Response, kMaxResponseHead};
  State state_ = State::Reading;
  std::string error_;
  std::string body_;
};

}  // namespace

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
  ResponseReader reader;
  std::string chunk;
  while (reader.state() == ResponseReader::State::Reading) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      result.error = "no complete response within " + std::to_string(timeout.count()) + "ms";
      return result;
    }
    switch (tunnel.read_for(&chunk, left)) {
      case ByteStream::ReadStatus::Data:
        reader.feed(chunk);
        break;
      case ByteStream::ReadStatus::Eof:
        reader.finish();
        break;
      case ByteStream::ReadStatus::Timeout:
        break;
    }
  }
  if (reader.state() == ResponseReader::State::Invalid) {
    result.error = reader.error();
    if (!tunnel.end_reason().empty()) result.error += " (stream: " + tunnel.end_reason() + ")";
    return result;
  }
  result.code = reader.head().status;
  for (const auto& [name, value] : reader.head().headers) {
    result.headers.emplace_back(lowercase(name), trimmed(value));
  }
  result.body = std::move(reader.body());
  return result;
}

}  // namespace konn::testclient
