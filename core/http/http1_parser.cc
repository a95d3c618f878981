#include "core/http/http1_parser.h"

#include <algorithm>
#include <cctype>
#include <mutex>

#include <http_parser.h>

namespace konn::core::http {
namespace {

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls `fn` for every comma-separated, trimmed, non-empty element of `value`.
template <typename Fn>
void for_each_token(std::string_view value, Fn&& fn) {
  while (!value.empty()) {
    size_t comma = value.find(',');
    std::string_view item = trim(value.substr(0, comma));
    if (!item.empty()) fn(item);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
}

// http-parser keeps its own header limit (80 KiB by default) in a global; ours is per parser, so
// lift the library's once to a value above any sane per-parser limit.
void lift_library_limit() {
  static std::once_flag once;
  std::call_once(once, [] { http_parser_set_max_header_size(256u << 20); });
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return lower(x) == lower(y); });
}

const std::string* MessageHead::find(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return &v;
  }
  return nullptr;
}

bool MessageHead::has_token(std::string_view name, std::string_view token) const {
  bool found = false;
  for (const auto& [k, v] : headers) {
    if (!iequals(k, name)) continue;
    for_each_token(v, [&](std::string_view t) { found = found || iequals(t, token); });
  }
  return found;
}

struct Http1Parser::Impl {
  http_parser parser{};
  http_parser_settings settings{};
  Http1Parser* owner = nullptr;

  static Http1Parser& self(http_parser* p) { return *static_cast<Impl*>(p->data)->owner; }

  // Returns non-zero (abort) when the head grew past its limit.
  static int grow(Http1Parser& s, size_t n) {
    s.head_bytes_ += n;
    if (s.head_bytes_ > s.max_head_bytes_) {
      s.fail(431, "request header fields too large");
      return 1;
    }
    return 0;
  }

  static int on_url(http_parser* p, const char* at, size_t n) {
    auto& s = self(p);
    s.head_.target.append(at, n);
    return grow(s, n);
  }
  static int on_status(http_parser* p, const char* at, size_t n) {
    auto& s = self(p);
    s.head_.reason.append(at, n);
    return grow(s, n);
  }
  static int on_header_field(http_parser* p, const char* at, size_t n) {
    auto& s = self(p);
    if (s.in_value_) {
      s.field_.clear();
      s.in_value_ = false;
    }
    s.field_.append(at, n);
    return grow(s, n + 4);  // ": " and CRLF count toward the head too
  }
  static int on_header_value(http_parser* p, const char* at, size_t n) {
    auto& s = self(p);
    if (!s.in_value_) {
      s.head_.headers.emplace_back(s.field_, std::string());
      s.in_value_ = true;
    }
    s.head_.headers.back().second.append(at, n);
    return grow(s, n);
  }
  static int on_headers_complete(http_parser* p) {
    auto& s = self(p);
    if (!s.on_head_complete()) return -1;
    return (s.kind_ == Kind::Response && s.no_body_) ? 1 : 0;
  }
  static int on_body(http_parser* p, const char* at, size_t n) {
    auto& s = self(p);
    if (s.body_out_ != nullptr) s.body_out_->emplace_back(at, n);
    return 0;
  }
  static int on_message_complete(http_parser* p) {
    auto& s = self(p);
    s.complete_ = true;
    http_parser_pause(p, 1);
    return 0;
  }
};

Http1Parser::Http1Parser(Kind kind, size_t max_head_bytes)
    : kind_(kind), max_head_bytes_(max_head_bytes), impl_(std::make_unique<Impl>()) {
  lift_library_limit();
  impl_->owner = this;
  auto& st = impl_->settings;
  st.on_url = &Impl::on_url;
  st.on_status = &Impl::on_status;
  st.on_header_field = &Impl::on_header_field;
  st.on_header_value = &Impl::on_header_value;
  st.on_headers_complete = &Impl::on_headers_complete;
  st.on_body = &Impl::on_body;
  st.on_message_complete = &Impl::on_message_complete;
  reset();
}

Http1Parser::~Http1Parser() = default;

void Http1Parser::reset() {
  http_parser_init(&impl_->parser, kind_ == Kind::Request ? HTTP_REQUEST : HTTP_RESPONSE);
  impl_->parser.data = impl_.get();
  head_ = MessageHead{};
  field_.clear();
  in_value_ = false;
  head_ready_ = false;
  complete_ = false;
  no_body_ = false;
  failed_ = false;
  head_bytes_ = 0;
  bytes_seen_ = 0;
  error_.clear();
  error_status_ = 400;
}

void Http1Parser::fail(int status, std::string text) {
  if (failed_) return;
  failed_ = true;
  error_status_ = status;
  error_ = std::move(text);
}

bool Http1Parser::on_head_complete() {
  const http_parser& p = impl_->parser;
  head_.version_major = p.http_major;
  head_.version_minor = p.http_minor;
  if (kind_ == Kind::Request) {
    head_.method = http_method_str(static_cast<http_method>(p.method));
  } else {
    head_.status = static_cast<int>(p.status_code);
    // http-parser takes "HTTP/1.1 20 OK" as status 20; the status is three digits (RFC 9112
    // section 4), and Go's client refuses anything else, so a relay must not pass it on.
    if (head_.status < 100) {
      fail(400, "malformed status code");
      return false;
    }
  }

  // Framing checks (smuggling): look at the headers ourselves rather than trusting flags.
  std::optional<uint64_t> length;
  std::vector<std::string> codings;
  bool has_te = false;
  for (const auto& [k, v] : head_.headers) {
    if (iequals(k, "Content-Length")) {
      std::string_view t = trim(v);
      if (t.empty() || t.size() > 19 ||
          !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        fail(400, "invalid Content-Length");
        return false;
      }
      uint64_t n = std::stoull(std::string(t));
      if (length && *length != n) {
        fail(400, "conflicting Content-Length values");
        return false;
      }
      length = n;
    } else if (iequals(k, "Transfer-Encoding")) {
      has_te = true;
      for_each_token(v, [&](std::string_view c) { codings.emplace_back(c); });
    }
  }
  if (has_te && length) {
    fail(400, "both Content-Length and Transfer-Encoding present");
    return false;
  }
  if (has_te && kind_ == Kind::Request &&
      (codings.empty() || !iequals(codings.back(), "chunked") ||
       std::count_if(codings.begin(), codings.end(),
                     [](const std::string& c) { return iequals(c, "chunked"); }) != 1)) {
    fail(400, "unsupported Transfer-Encoding");
    return false;
  }
  head_.content_length = length;
  head_.chunked = (p.flags & F_CHUNKED) != 0;
  head_.keep_alive = http_should_keep_alive(&p) != 0;
  head_.upgrade = p.upgrade != 0 || (kind_ == Kind::Request && p.method == HTTP_CONNECT);
  head_ready_ = true;
  return true;
}

Http1Parser::Result Http1Parser::feed(std::string_view data) {
  Result r;
  if (failed_) {
    r.status = Status::Invalid;
    return r;
  }
  if (complete_) {
    r.status = Status::MessageComplete;
    return r;
  }
  if (data.empty()) return r;
  bool had_head = head_ready_;
  body_out_ = &r.body;
  size_t n = http_parser_execute(&impl_->parser, &impl_->settings, data.data(), data.size());
  body_out_ = nullptr;
  bytes_seen_ += n;
  r.consumed = n;
  r.head_complete = head_ready_ && !had_head;
  auto err = HTTP_PARSER_ERRNO(&impl_->parser);
  if (failed_) {
    r.status = Status::Invalid;
    r.body.clear();
    return r;
  }
  if (complete_) {
    r.status = Status::MessageComplete;
    return r;
  }
  if (err != HPE_OK) {
    if (err == HPE_HEADER_OVERFLOW) {
      fail(431, "request header fields too large");
    } else if (err == HPE_UNEXPECTED_CONTENT_LENGTH) {
      fail(400, "both Content-Length and Transfer-Encoding present, or repeated Content-Length");
    } else {
      fail(400, std::string(http_errno_description(err)));
    }
    r.status = Status::Invalid;
    r.body.clear();
    return r;
  }
  if (!head_ready_ && bytes_seen_ > max_head_bytes_) {
    fail(431, "request header fields too large");
    r.status = Status::Invalid;
  }
  return r;
}

bool Http1Parser::finish() {
  if (failed_) return false;
  if (complete_) return true;
  if (bytes_seen_ == 0) return false;
  http_parser_execute(&impl_->parser, &impl_->settings, nullptr, 0);
  if (complete_) return true;
  fail(400, "connection closed before the message ended");
  return false;
}

}  // namespace konn::core::http
