#pragma once

#include <chrono>
#include <functional>
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

}  // namespace konn::core::net
