#pragma once

#include <string>
#include <string_view>

namespace konn::core::konnectivity {

// Why a dial through the proxy-server failed, in classes a caller can map onto its own protocol
// (SOCKS reply codes, HTTP statuses). The agent only sends text, so the class is read from that
// text the way the proxy-server's HTTP-CONNECT frontend reads it.
enum class DialFailure {
  None,              // the dial succeeded
  Refused,           // the destination refused or reset ("connect: connection refused")
  NetUnreachable,    // "network is unreachable"
  HostUnreachable,   // "no route to host", "host is unreachable", a name that does not resolve
  Timeout,           // the agent's dial timed out, or no answer within our dial timeout
  NoAgent,           // the proxy-server has no agent for this destination ("No agent available")
  ProxyUnavailable,  // the proxy-server itself could not be reached or broke the stream
  Other,             // anything else the agent or proxy-server said
};

// Metric label and log word: "refused", "net_unreachable", "host_unreachable", "timeout",
// "no_agent", "proxy_unavailable", "other" ("none" for None).
const char* to_string(DialFailure f);

struct DialError {
  DialFailure failure = DialFailure::None;
  // The reason as the agent or proxy-server gave it, or what went wrong on our side; never empty
  // on failure. E.g. "dial tcp 127.0.0.1:1: connect: connection refused".
  std::string text;
  // http-connect mode: the proxy-server's status when it answered something other than 200.
  int http_status = 0;

  explicit operator bool() const { return failure != DialFailure::None; }
};

// Classifies an error text from the agent (DIAL_RSP error) or a proxy-server error body.
DialFailure classify(std::string_view text);

// The HTTP status a proxy answers its own client with for `e`: the proxy-server's own 502/503/504
// when it sent one, else 503 for no agent, 504 for a timeout, 502 for everything else.
int http_status_for(const DialError& e);

}  // namespace konn::core::konnectivity
