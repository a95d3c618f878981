#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace konn::socks5::codec {

using Bytes = std::span<const uint8_t>;

// Outcome of an incremental parse over the bytes received so far (Asio request_parser style):
// NeedMore means "read more and call again with everything", never an error.
enum class ParseStatus {
  Complete,  // a whole message was read; `consumed` bytes belong to it
  NeedMore,  // the message is not complete yet
  Invalid,   // the bytes can never form a valid message
};

}  // namespace konn::socks5::codec
