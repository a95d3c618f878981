#pragma once

// Pieces shared by the session's command handlers (session.cc, bind_command.cc,
// udp_associate.cc). Not part of the library's interface.

#include <optional>
#include <string>
#include <vector>

#include <asio/ip/tcp.hpp>

#include "core/io/asio_compat.h"
#include "socks5/codec/reply.h"
#include "socks5/codec/request.h"
#include "socks5/session.h"

namespace konn::socks5::detail {

// Writes all of `bytes`; false on error.
core::io::Awaitable<bool> write_all(asio::ip::tcp::socket& s, const std::vector<uint8_t>& bytes);

// Sends a reply and records it in `info`.
core::io::Awaitable<bool> send_reply(asio::ip::tcp::socket& s, SessionInfo& info,
                                     codec::ReplyCode code, asio::ip::address bound = {},
                                     uint16_t port = 0);

// Applies the rules to one destination; logs a denial line unless `log_denial` is false (UDP
// logs only an association's first denial: one line per datagram would flood the log). `host`
// is "" for IP requests. With `dest_unresolved`, `host` goes to a Konnectivity agent
// unresolved: `dest` is unknown and `to=` rules do not match.
bool allowed(const SessionEnv& env, const SessionInfo& info, const std::string& command,
             const std::string& host, const asio::ip::address& dest, uint16_t port,
             bool dest_unresolved = false, bool log_denial = true);

// The handlers after a successful request parse. Each sends its replies and ends the session's
// work; `early` holds bytes the client sent after the request.
core::io::Awaitable<void> handle_connect(asio::ip::tcp::socket& client, const codec::Request& req,
                                         std::vector<uint8_t> early, SessionEnv env,
                                         SessionInfo& info, SessionHandle& handle);
core::io::Awaitable<void> handle_bind(asio::ip::tcp::socket& client, const codec::Request& req,
                                      std::vector<uint8_t> early, SessionEnv env, SessionInfo& info,
                                      SessionHandle& handle);
core::io::Awaitable<void> handle_udp_associate(asio::ip::tcp::socket& client,
                                               const codec::Request& req, SessionEnv env,
                                               SessionInfo& info, SessionHandle& handle);

// Relays two connected TCP sockets until both directions end (splice or buffered, idle
// timeout applied), adding the byte counts to `info`.
core::io::Awaitable<void> relay_tcp(asio::ip::tcp::socket& client, asio::ip::tcp::socket& upstream,
                                    const Socks5Options& options, SessionInfo& info);

// The data phase of a CONNECT through the Konnectivity upstream: splice(2) when the tunnel is a
// plain unix socket (HTTP CONNECT mode) and --splice is on, else core/relay (64 KiB buffers at
// least, so gRPC DATA packets stay large). Idle timeout as relay_tcp.
core::io::Awaitable<void> relay_tunnel(asio::ip::tcp::socket& client,
                                       core::konnectivity::Tunnel& tunnel,
                                       const Socks5Options& options, SessionInfo& info);

// The SOCKS reply for a failed dial through the Konnectivity upstream (see README).
codec::ReplyCode reply_for_dial_failure(core::konnectivity::DialFailure f);

inline asio::ip::address unmap(const asio::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  }
  return a;
}

}  // namespace konn::socks5::detail
