#include "core/net/dialer.h"

#include <sys/socket.h>

#include <cctype>
#include <cerrno>
#include <vector>

#include <asio/ip/address.hpp>

#include "core/error/errc.h"
#include "core/net/endpoint.h"

namespace konn::core::net {
namespace {

using namespace asio::experimental::awaitable_operators;

std::string go_style(const std::string& address, const std::string& op, std::error_code ec) {
  std::string msg = ec.message();
  if (!msg.empty()) msg[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(msg[0])));
  return "dial tcp " + address + ": " + op + (op.empty() ? "" : ": ") + msg;
}

}  // namespace

void set_nodelay(asio::ip::tcp::socket& s) {
  std::error_code ignored;
  s.set_option(asio::ip::tcp::no_delay(true), ignored);
}

std::optional<asio::ip::tcp::endpoint> literal_endpoint(const std::string& address) {
  auto hp = parse_host_port(address);
  if (!hp) return std::nullopt;
  std::error_code ec;
  auto ip = asio::ip::make_address(hp->host, ec);
  if (ec) return std::nullopt;
  return asio::ip::tcp::endpoint(ip, hp->port);
}

std::error_code begin_connect(asio::ip::tcp::socket& socket, const asio::ip::tcp::endpoint& to) {
  std::error_code ec;
  socket.open(to.protocol(), ec);
  if (!ec) socket.non_blocking(true, ec);
  if (ec) return ec;
  for (;;) {
    if (::connect(socket.native_handle(), to.data(), static_cast<socklen_t>(to.size())) == 0) {
      set_nodelay(socket);
      return {};
    }
    if (errno == EINTR) continue;
    if (errno != EINPROGRESS) return {errno, asio::error::get_system_category()};
    // A destination on loopback has, as a rule, answered by the time connect(2) returns (the
    // handshake runs within the call; 2000 of 2000 on the development VM): asking again gives
    // the outcome, where a wait for writability would cost an epoll_ctl, a pass through the
    // reactor, a timer and a getsockopt. A destination further away is still in the handshake
    // (EALREADY) and is waited for.
    if (::connect(socket.native_handle(), to.data(), static_cast<socklen_t>(to.size())) == 0 ||
        errno == EISCONN) {
      set_nodelay(socket);
      return {};
    }
    if (errno == EALREADY || errno == EINPROGRESS || errno == EINTR) {
      return asio::error::in_progress;
    }
    return {errno, asio::error::get_system_category()};
  }
}

std::error_code end_connect(asio::ip::tcp::socket& socket) {
  int error = 0;
  socklen_t len = sizeof(error);
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_ERROR, &error, &len) != 0) {
    error = errno;
  }
  if (error != 0) return {error, asio::error::get_system_category()};
  set_nodelay(socket);
  return {};
}

std::string connect_error_text(const std::string& address, std::error_code ec) {
  return go_style(address, "connect", ec);
}

std::string timeout_error_text(const std::string& address) {
  return "dial tcp " + address + ": i/o timeout";
}

std::string not_allowed_error_text(const std::string& address, const std::string& refused) {
  return "dial tcp " + address + ": destination " + refused + " not allowed";
}

io::Awaitable<DialResult> dial_tcp(asio::any_io_executor ex, std::string address,
                                   std::chrono::milliseconds timeout, AddressFilter allowed) {
  DialResult out{{}, asio::ip::tcp::socket(ex), {}};
  auto hp = parse_host_port(address);
  if (!hp) {
    out.ec = konn::Errc::InvalidArgument;
    out.error_text = "dial tcp " + address + ": address " + address + ": missing port in address";
    co_return out;
  }
  asio::steady_timer timer(ex, timeout);
  // What the address names: an IP literal is itself (no lookup); a name is looked up by Asio's
  // resolver, which runs getaddrinfo on a thread of its own. Literals are what kube-apiserver
  // dials almost always, and the lookup would cost every dial two thread hops.
  std::vector<asio::ip::tcp::endpoint> candidates;
  std::error_code literal_ec;
  auto literal = asio::ip::make_address(hp->host, literal_ec);
  if (!literal_ec) {
    candidates.emplace_back(literal, hp->port);
  } else {
    asio::ip::tcp::resolver resolver(ex);
    auto resolved =
        co_await (resolver.async_resolve(hp->host, std::to_string(hp->port), io::use_nothrow) ||
                  timer.async_wait(io::use_nothrow));
    if (resolved.index() == 1) {
      out.ec = konn::Errc::DialTimeout;
      out.error_text = timeout_error_text(address);
      co_return out;
    }
    auto [rec, results] = std::get<0>(std::move(resolved));
    if (rec) {
      out.ec = rec;
      out.error_text = "dial tcp: lookup " + hp->host + ": no such host";
      co_return out;
    }
    for (const auto& entry : results) candidates.push_back(entry.endpoint());
  }
  std::vector<asio::ip::tcp::endpoint> endpoints;
  std::string refused;
  for (const auto& ep : candidates) {
    if (!allowed || allowed(ep)) {
      endpoints.push_back(ep);
    } else {
      refused += (refused.empty() ? "" : ",") + ep.address().to_string();
    }
  }
  if (endpoints.empty() && !refused.empty()) {
    out.ec = konn::Errc::DestinationNotAllowed;
    out.error_text = not_allowed_error_text(address, refused);
    co_return out;
  }
  auto connected = co_await (asio::async_connect(out.socket, endpoints, io::use_nothrow) ||
                             timer.async_wait(io::use_nothrow));
  if (connected.index() == 1) {
    out.ec = konn::Errc::DialTimeout;
    out.error_text = timeout_error_text(address);
    std::error_code ignored;
    out.socket.close(ignored);
    co_return out;
  }
  auto [cec, endpoint] = std::get<0>(std::move(connected));
  if (cec) {
    out.ec = cec;
    out.error_text = connect_error_text(address, cec);
    co_return out;
  }
  set_nodelay(out.socket);
  co_return out;
}

}  // namespace konn::core::net
