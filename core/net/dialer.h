#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include <asio/ip/tcp.hpp>

#include "core/io/asio_compat.h"

namespace konn::core::net {

struct DialResult {
  std::error_code ec;
  asio::ip::tcp::socket socket;
  // On failure: a Go-style description ("dial tcp 10.0.0.1:80: connect: connection refused",
  // "dial tcp 10.0.0.1:80: i/o timeout"), which upstream peers match on for "timeout".
  std::string error_text;
};

// Which resolved addresses a dial may connect to (empty: all).
using AddressFilter = std::function<bool(const asio::ip::tcp::endpoint&)>;

// Resolves and connects `address` ("host:port") within `timeout`, trying each resolved address in
// turn. The socket comes back with TCP_NODELAY set. Cancellation: closing happens by timeout only.
// With `allowed`, every resolved address is checked and only those it accepts are tried, so a
// name cannot lead a dial to a refused address; when it accepts none, the dial fails with
// Errc::DestinationNotAllowed ("dial tcp <address>: destination <ip> not allowed").
io::Awaitable<DialResult> dial_tcp(asio::any_io_executor ex, std::string address,
                                   std::chrono::milliseconds timeout, AddressFilter allowed = {});

// Sets TCP_NODELAY (every proxied socket gets it: small writes must not wait for Nagle).
void set_nodelay(asio::ip::tcp::socket& s);

// The endpoint an IP-literal `address` names ("10.0.0.1:443", "[fd00::1]:80"): what
// kube-apiserver dials almost always. Nothing for a host name (a lookup: dial_tcp) or a malformed
// address.
std::optional<asio::ip::tcp::endpoint> literal_endpoint(const std::string& address);

// A connect without a coroutine, for a caller that keeps the state of its dial itself (the agent
// dials once per tunnel: no coroutine frame, no parallel group, no poll(2)). begin_connect()
// opens `socket` (closed, non-blocking from then on) and connects it to `to`: no error means
// connected (TCP_NODELAY set), which a destination on loopback is, as a rule, by the time it
// returns; asio::error::in_progress means wait until the socket is writable and then ask
// end_connect(), which gives the outcome and sets TCP_NODELAY on success. Any other error is the
// connect's own (a refusal from the same host comes back here, not after a wait).
std::error_code begin_connect(asio::ip::tcp::socket& socket, const asio::ip::tcp::endpoint& to);
std::error_code end_connect(asio::ip::tcp::socket& socket);

// dial_tcp's error texts, in Go's words (upstream peers match "timeout" in them).
std::string connect_error_text(const std::string& address, std::error_code ec);
std::string timeout_error_text(const std::string& address);
// `refused`: the addresses the AddressFilter refused, comma-separated.
std::string not_allowed_error_text(const std::string& address, const std::string& refused);

}  // namespace konn::core::net
