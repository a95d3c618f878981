#pragma once

#include <functional>
#include <string>
#include <system_error>

#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>

namespace konn::core::net {

// Opens a TCP acceptor on host:port (host "" = all interfaces; port 0 = any free port) with
// SO_REUSEADDR. Throws std::system_error naming the address on failure (startup is fatal).
asio::ip::tcp::acceptor listen_tcp(asio::io_context& ctx, const std::string& host, uint16_t port);

// Opens a unix-socket acceptor at `path`. With `delete_existing`, a stale socket file is removed
// first. The socket file is created with `mode` (e.g. 0770) before anyone can connect.
asio::local::stream_protocol::acceptor listen_unix(asio::io_context& ctx, const std::string& path,
                                                   bool delete_existing, unsigned mode);

// Prepares a unix socket path for a listener that someone else (gRPC) binds: removes a stale file
// when asked, and returns the umask to set around the bind so the file gets `mode`.
void remove_stale_socket(const std::string& path);

}  // namespace konn::core::net
