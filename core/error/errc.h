#pragma once

#include <string>
#include <system_error>

namespace konn {

// Errors of konn's own making, composable with Asio's and the OS's through std::error_code.
enum class Errc {
  Ok = 0,
  NoAgentAvailable,       // no backend can serve the dial (upstream text "No agent available")
  DialTimeout,            // the destination did not accept the connection in time
  DialFailed,             // the agent answered the dial with an error
  AgentDisconnected,      // the agent stream ended while a dial or tunnel depended on it
  QueueOverflow,          // a tunnel's queue passed its hard cap; the tunnel alone was closed
  ProtocolViolation,      // the peer sent something the protocol does not allow here
  InvalidArgument,        // bad configuration or request content
  Closed,                 // the object was already closed
  Timeout,                // a deadline passed
  DestinationNotAllowed,  // every address of the destination is outside the dialler's policy
};

const std::error_category& konn_category() noexcept;
std::error_code make_error_code(Errc e) noexcept;

}  // namespace konn

template <>
struct std::is_error_code_enum<konn::Errc> : std::true_type {};
