#include "core/net/listener.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <asio/ip/v6_only.hpp>

namespace konn::core::net {

namespace {
// As long a listen backlog as the kernel allows: Linux cuts a larger one to net.core.somaxconn
// (4096 by default) without an error, so raising that sysctl is all an operator needs. Under
// handshake admission (core/h2/listener.h) a reconnect storm waits here, costing no descriptor.
constexpr int kListenBacklog = 65535;
}  // namespace

asio::ip::tcp::acceptor listen_tcp(asio::io_context& ctx, const std::string& host, uint16_t port) {
  asio::ip::tcp::endpoint ep;
  if (host.empty()) {
    ep = asio::ip::tcp::endpoint(asio::ip::tcp::v6(), port);
  } else {
    ep = asio::ip::tcp::endpoint(asio::ip::make_address(host), port);
  }
  asio::ip::tcp::acceptor acceptor(ctx);
  std::error_code ec;
  acceptor.open(ep.protocol(), ec);
  if (!ec && host.empty()) acceptor.set_option(asio::ip::v6_only(false), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(kListenBacklog, ec);
  if (ec) {
    throw std::system_error(ec, "listen on " + (host.empty() ? std::string("*") : host) + ":" +
                                    std::to_string(port));
  }
  return acceptor;
}

void remove_stale_socket(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
}

asio::local::stream_protocol::acceptor listen_unix(asio::io_context& ctx, const std::string& path,
                                                   bool delete_existing, unsigned mode) {
  if (delete_existing) remove_stale_socket(path);
  asio::local::stream_protocol::acceptor acceptor(ctx);
  std::error_code ec;
  acceptor.open(asio::local::stream_protocol(), ec);
  // The umask applies at bind time: no window in which the socket has wider permissions.
  mode_t old = ::umask(static_cast<mode_t>(~mode & 0777));
  if (!ec) acceptor.bind(asio::local::stream_protocol::endpoint(path), ec);
  ::umask(old);
  if (!ec) acceptor.listen(kListenBacklog, ec);
  if (ec) throw std::system_error(ec, "listen on unix socket " + path);
  return acceptor;
}

}  // namespace konn::core::net
