#include "core/http/http1_writer.h"

#include <array>
#include <cstdio>

namespace konn::core::http {
namespace {

void append_headers(std::string& out, const Headers& headers) {
  for (const auto& [k, v] : headers) {
    out.append(k).append(": ").append(v).append("\r\n");
  }
  out.append("\r\n");
}

}  // namespace

std::string write_request_head(std::string_view method, std::string_view target,
                               const Headers& headers) {
  std::string out;
  out.reserve(256);
  out.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
  append_headers(out, headers);
  return out;
}

std::string write_response_head(int status, std::string_view reason, const Headers& headers) {
  std::string out;
  out.reserve(256);
  out.append("HTTP/1.1 ").append(std::to_string(status)).append(" ");
  out.append(reason.empty() ? reason_phrase(status) : reason).append("\r\n");
  append_headers(out, headers);
  return out;
}

std::string write_text_response(int status, std::string_view body, bool close,
                                const Headers& extra) {
  Headers h{{"Content-Type", "text/plain; charset=utf-8"},
            {"X-Content-Type-Options", "nosniff"},
            {"Content-Length", std::to_string(body.size())}};
  if (close) h.emplace_back("Connection", "close");
  h.insert(h.end(), extra.begin(), extra.end());
  std::string out = write_response_head(status, "", h);
  out.append(body);
  return out;
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 101:
      return "Switching Protocols";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 206:
      return "Partial Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 407:
      return "Proxy Authentication Required";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Request Entity Too Large";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Unknown";
  }
}

std::string chunk_header(size_t size) {
  std::array<char, 24> buf{};
  int n = std::snprintf(buf.data(), buf.size(), "%zx\r\n", size);
  return std::string(buf.data(), static_cast<size_t>(n));
}

bool is_hop_by_hop(const MessageHead& head, std::string_view name) {
  static constexpr std::array<std::string_view, 9> kHop = {"Connection",
                                                           "Proxy-Connection",
                                                           "Keep-Alive",
                                                           "Proxy-Authenticate",
                                                           "Proxy-Authorization",
                                                           "TE",
                                                           "Trailer",
                                                           "Transfer-Encoding",
                                                           "Upgrade"};
  for (auto h : kHop) {
    if (iequals(h, name)) return true;
  }
  return head.has_token("Connection", name);
}

}  // namespace konn::core::http
