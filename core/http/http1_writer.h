#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/http/http1_parser.h"

namespace konn::core::http {

// Serializers for HTTP/1.1 message heads and chunked framing. Callers own the returned text and
// send it with the body as one gather write. Header names and values are written as given; they
// must not contain CR or LF (values from Http1Parser never do).

// "GET /api HTTP/1.1\r\nName: value\r\n...\r\n"
std::string write_request_head(std::string_view method, std::string_view target,
                               const Headers& headers);

// "HTTP/1.1 200 OK\r\n...\r\n"; an empty `reason` takes the standard phrase.
std::string write_response_head(int status, std::string_view reason, const Headers& headers);

// A complete small response with a text body, Content-Type text/plain and Content-Length set,
// in the form Go's http.Error writes ("Forbidden\n"). `close` adds "Connection: close".
std::string write_text_response(int status, std::string_view body, bool close,
                                const Headers& extra = {});

// The standard reason phrase ("Not Found"), or "Unknown".
std::string_view reason_phrase(int status);

// Chunked transfer coding: "1a2b\r\n" before `size` bytes of data, "\r\n" after them, and the
// last chunk.
std::string chunk_header(size_t size);
inline constexpr std::string_view kChunkEnd = "\r\n";
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// True for headers that describe one hop only and must not be forwarded (RFC 9110 7.6.1), plus
// every header named in the message's Connection header.
bool is_hop_by_hop(const MessageHead& head, std::string_view name);

}  // namespace konn::core::http
