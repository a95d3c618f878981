#include "core/h2/header_check.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fmt/format.h>

namespace konn::core::h2 {

namespace {

constexpr uint8_t kMethod = 1 << 0;
constexpr uint8_t kScheme = 1 << 1;
constexpr uint8_t kPath = 1 << 2;
constexpr uint8_t kAuthority = 1 << 3;
constexpr uint8_t kStatus = 1 << 4;

// RFC 9110 tchar, lower case only (RFC 9113 8.2.1: field names are lower case on HTTP/2).
bool token_char(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-':
    case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool control(unsigned char c) { return c < 0x20 || c == 0x7f; }

// Printable for a log line: at most 64 bytes, control bytes escaped.
std::string shown(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 64)) {
    if (control(c) || c >= 0x80) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > 64) out += "...";
  return out;
}

uint8_t pseudo_bit(std::string_view name) {
  if (name == ":method") return kMethod;
  if (name == ":scheme") return kScheme;
  if (name == ":path") return kPath;
  if (name == ":authority") return kAuthority;
  if (name == ":status") return kStatus;
  return 0;
}

bool connection_specific(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade";
}

}  // namespace

bool HeaderBlockCheck::fail(std::string why) {
  if (error_.empty()) error_ = std::move(why);
  return false;
}

bool HeaderBlockCheck::add(std::string_view name, std::string_view value) {
  if (malformed()) return false;
  if (name.empty()) return fail("empty header name");
  if (name[0] == ':') {
    const uint8_t bit = pseudo_bit(name);
    if (kind_ == Kind::Trailers) return fail(fmt::format("pseudo-header {} in trailers", name));
    if (regular_seen_) return fail(fmt::format("pseudo-header {} after a regular header", name));
    const uint8_t allowed = kind_ == Kind::Request ? (kMethod | kScheme | kPath | kAuthority)
                                                   : kStatus;
    if ((bit & allowed) == 0) return fail(fmt::format("pseudo-header {} not allowed here", shown(name)));
    if ((pseudo_seen_ & bit) != 0) return fail(fmt::format("pseudo-header {} twice", name));
    pseudo_seen_ |= bit;
    switch (bit) {
      case kMethod:
        if (value.empty()) return fail("empty :method");
        for (unsigned char c : value) {
          if (!token_char(c) && !(c >= 'A' && c <= 'Z')) {
            return fail(fmt::format(":method '{}' is not a token", shown(value)));
          }
        }
        method_ = value;
        return true;
      case kScheme:
        if (value.empty()) return fail("empty :scheme");
        for (unsigned char c : value) {
          if (!std::isalnum(c) && c != '+' && c != '-' && c != '.') {
            return fail(fmt::format(":scheme '{}' is not a scheme", shown(value)));
          }
        }
        return true;
      case kPath:
        if (value.empty()) return fail("empty :path");
        for (unsigned char c : value) {
          if (control(c) || c == ' ') {
            return fail(fmt::format(":path '{}' has a control byte or a space", shown(value)));
          }
        }
        return true;
      case kAuthority:
        // Anything printable: a unix socket path, host:port, empty, percent-encoded forms. It
        // only names the peer's view of us; nothing routes or forwards on it.
        for (unsigned char c : value) {
          if (control(c)) {
            return fail(fmt::format(":authority '{}' has a control byte", shown(value)));
          }
        }
        return true;
      case kStatus:
        if (value.size() != 3 || !std::isdigit(static_cast<unsigned char>(value[0])) ||
            !std::isdigit(static_cast<unsigned char>(value[1])) ||
            !std::isdigit(static_cast<unsigned char>(value[2]))) {
          return fail(fmt::format(":status '{}' is not three digits", shown(value)));
        }
        return true;
      default:
        return true;
    }
  }
  regular_seen_ = true;
  for (unsigned char c : name) {
    if (c >= 'A' && c <= 'Z') return fail(fmt::format("upper-case header name {}", shown(name)));
    if (!token_char(c)) return fail(fmt::format("invalid header name {}", shown(name)));
  }
  for (unsigned char c : value) {
    if (control(c) && c != '\t') {
      return fail(fmt::format("header {} has a control byte in its value", name));
    }
  }
  if (connection_specific(name)) {
    return fail(fmt::format("connection-specific header {}", name));
  }
  if (name == "te" && value != "trailers") {
    return fail(fmt::format("te '{}' (only \"trailers\" is allowed)", shown(value)));
  }
  if (name == "content-length" && kind_ != Kind::Trailers) {
    uint64_t n = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size()) {
      return fail(fmt::format("content-length '{}' is not a number", shown(value)));
    }
    if (content_length_ && *content_length_ != n) return fail("two different content-lengths");
    content_length_ = n;
  }
  return true;
}

bool HeaderBlockCheck::finish(bool end_stream) {
  if (malformed()) return false;
  switch (kind_) {
    case Kind::Request:
      if ((pseudo_seen_ & kMethod) == 0) return fail("request without :method");
      if (method_ == "CONNECT") {
        if ((pseudo_seen_ & kAuthority) == 0) return fail("CONNECT without :authority");
        if ((pseudo_seen_ & (kScheme | kPath)) != 0) return fail("CONNECT with :scheme or :path");
        return true;
      }
      if ((pseudo_seen_ & kScheme) == 0) return fail("request without :scheme");
      if ((pseudo_seen_ & kPath) == 0) return fail("request without :path");
      return true;
    case Kind::Response:
      if ((pseudo_seen_ & kStatus) == 0) return fail("response without :status");
      return true;
    case Kind::Trailers:
      if (!end_stream) return fail("a second header block without END_STREAM");
      return true;
  }
  return true;
}

bool FrameScan::ended(int32_t id) const {
  for (int32_t e : ended_) {
    if (e == id) return true;
  }
  return false;
}

std::optional<FrameScan::Violation> FrameScan::scan(std::string_view in) {
  constexpr uint8_t kData = 0x0, kHeaders = 0x1, kRstStream = 0x3, kEndStream = 0x1;
  size_t i = 0;
  while (i < in.size()) {
    if (skip_ > 0) {
      const size_t n = std::min(skip_, in.size() - i);
      skip_ -= n;
      i += n;
      continue;
    }
    const size_t head_start = i >= have_ ? i - have_ : 0;
    const size_t n = std::min(sizeof(head_) - have_, in.size() - i);
    std::copy_n(reinterpret_cast<const uint8_t*>(in.data()) + i, n, head_ + have_);
    have_ += n;
    i += n;
    if (have_ < sizeof(head_)) break;
    have_ = 0;
    skip_ = static_cast<size_t>(head_[0]) << 16 | static_cast<size_t>(head_[1]) << 8 | head_[2];
    const uint8_t type = head_[3];
    const uint8_t flags = head_[4];
    const auto id = static_cast<int32_t>((static_cast<uint32_t>(head_[5]) << 24 |
                                          static_cast<uint32_t>(head_[6]) << 16 |
                                          static_cast<uint32_t>(head_[7]) << 8 | head_[8]) &
                                         0x7fffffffU);
    if (id == 0) continue;
    const bool data_or_headers = type == kData || type == kHeaders;
    if (data_or_headers && ended(id)) return Violation{head_start, id};
    if (type == kRstStream || (data_or_headers && (flags & kEndStream) != 0)) {
      ended_[next_] = id;
      next_ = (next_ + 1) % ended_.size();
    }
  }
  return std::nullopt;
}

}  // namespace konn::core::h2
