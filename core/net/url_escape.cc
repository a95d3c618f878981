#include "core/net/url_escape.h"

namespace konn::core::net {
namespace {

int hex_digit(char h) {
  if (h >= '0' && h <= '9') return h - '0';
  if (h >= 'a' && h <= 'f') return h - 'a' + 10;
  if (h >= 'A' && h <= 'F') return h - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> url_unescape(std::string_view s, UrlPart part) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '+' && part == UrlPart::QueryComponent) {
      out.push_back(' ');
    } else if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int hi = hex_digit(s[i + 1]);
      int lo = hex_digit(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string redact_url_credentials(const std::string& url) {
  auto scheme = url.find("://");
  size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  auto at = url.find('@', start);
  auto slash = url.find('/', start);
  if (at == std::string::npos || (slash != std::string::npos && at > slash)) return url;
  return url.substr(0, start) + "***" + url.substr(at);
}

}  // namespace konn::core::net
