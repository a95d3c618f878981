#include "test-client/http_response_parser.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace konn::testclient {
namespace {

constexpr size_t kMaxHead = 64 * 1024;
constexpr size_t kMaxLine = 4 * 1024;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

template <typename Int>
bool parse_number(std::string_view s, Int* out, int base = 10) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

HttpResponseParser::Status HttpResponseParser::fail(std::string why) {
  status_ = Status::Invalid;
  error_ = std::move(why);
  phase_ = Phase::Done;
  return status_;
}

std::string HttpResponseParser::header(std::string_view name) const {
  for (const auto& [k, v] : headers_) {
    if (k == name) return v;
  }
  return {};
}

bool HttpResponseParser::parse_head(std::string_view head) {
  headers_.clear();
  size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  // "HTTP/1.1 200 OK"
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || line[8] != ' ') {
    fail("bad status line: " + std::string(line.substr(0, 80)));
    return false;
  }
  if (!parse_number(line.substr(9, 3), &code_) || code_ < 100 || code_ > 999) {
    fail("bad status code: " + std::string(line.substr(0, 80)));
    return false;
  }
  reason_ = std::string(trim(line.substr(12)));
  while (eol != std::string_view::npos) {
    head.remove_prefix(eol + 2);
    eol = head.find("\r\n");
    std::string_view h = head.substr(0, eol);
    if (h.empty()) break;
    auto colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      fail("bad header line: " + std::string(h.substr(0, 80)));
      return false;
    }
    headers_.emplace_back(lower(trim(h.substr(0, colon))), std::string(trim(h.substr(colon + 1))));
  }
  return true;
}

HttpResponseParser::Status HttpResponseParser::feed(std::string_view bytes) {
  if (phase_ == Phase::Done) return status_;
  buf_.append(bytes);
  run();
  return status_;
}

void HttpResponseParser::run() {
  for (;;) {
    switch (phase_) {
      case Phase::Head: {
        size_t end = buf_.find("\r\n\r\n");
        if (end == std::string::npos) {
          if (buf_.size() > kMaxHead) fail("response head larger than 64 KiB");
          return;
        }
        if (!parse_head(std::string_view(buf_).substr(0, end + 2))) return;
        buf_.erase(0, end + 4);
        if (code_ >= 100 && code_ < 200) break;  // interim response: the real one follows
        std::string te = lower(header("transfer-encoding"));
        std::string cl = header("content-length");
        if (code_ == 204 || code_ == 304) {
          phase_ = Phase::Done;
          status_ = Status::Complete;
          return;
        }
        if (te.find("chunked") != std::string::npos) {
          phase_ = Phase::ChunkSize;
        } else if (!cl.empty()) {
          if (!parse_number(cl, &remaining_)) {
            fail("bad Content-Length: " + cl);
            return;
          }
          phase_ = Phase::Body;
        } else {
          phase_ = Phase::UntilEof;
        }
        break;
      }
      case Phase::Body: {
        size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, buf_.size()));
        body_.append(buf_, 0, n);
        buf_.erase(0, n);
        remaining_ -= n;
        if (remaining_ == 0) {
          phase_ = Phase::Done;
          status_ = Status::Complete;
        }
        return;
      }
      case Phase::ChunkSize: {
        size_t eol = buf_.find("\r\n");
        if (eol == std::string::npos) {
          if (buf_.size() > kMaxLine) fail("chunk size line too long");
          return;
        }
        std::string_view line(buf_.data(), eol);
        line = trim(line.substr(0, line.find(';')));  // chunk extensions are ignored
        if (!parse_number(line, &remaining_, 16)) {
          fail("bad chunk size: " + std::string(line.substr(0, 40)));
          return;
        }
        buf_.erase(0, eol + 2);
        phase_ = remaining_ == 0 ? Phase::Trailers : Phase::ChunkData;
        break;
      }
      case Phase::ChunkData: {
        size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, buf_.size()));
        body_.append(buf_, 0, n);
        buf_.erase(0, n);
        remaining_ -= n;
        if (remaining_ > 0) return;
        phase_ = Phase::ChunkDataEnd;
        break;
      }
      case Phase::ChunkDataEnd: {
        if (buf_.size() < 2) return;
        if (buf_.compare(0, 2, "\r\n") != 0) {
          fail("chunk not followed by CRLF");
          return;
        }
        buf_.erase(0, 2);
        phase_ = Phase::ChunkSize;
        break;
      }
      case Phase::Trailers: {
        size_t eol = buf_.find("\r\n");
        if (eol == std::string::npos) {
          if (buf_.size() > kMaxHead) fail("trailers too long");
          return;
        }
        buf_.erase(0, eol + 2);
        if (eol == 0) {
          phase_ = Phase::Done;
          status_ = Status::Complete;
          return;
        }
        break;
      }
      case Phase::UntilEof:
        body_.append(buf_);
        buf_.clear();
        return;
      case Phase::Done:
        return;
    }
  }
}

HttpResponseParser::Status HttpResponseParser::finish() {
  if (phase_ == Phase::UntilEof) {
    phase_ = Phase::Done;
    status_ = Status::Complete;
  } else if (phase_ != Phase::Done) {
    fail(phase_ == Phase::Head ? "connection ended before the response head"
                               : "connection ended inside the response body");
  }
  return status_;
}

}  // namespace konn::testclient
