#include "core/net/dialer.h"

#include <asio/ip/address.hpp>

#include <cctype>
#include <vector>

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
      out.error_text = "dial tcp " + address + ": i/o timeout";
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
    out.error_text = "dial tcp " + address + ": destination " + refused + " not allowed";
    co_return out;
  }
  auto connected = co_await (asio::async_connect(out.socket, endpoints, io::use_nothrow) ||
                             timer.async_wait(io::use_nothrow));
  if (connected.index() == 1) {
    out.ec = konn::Errc::DialTimeout;
    out.error_text = "dial tcp " + address + ": i/o timeout";
    std::error_code ignored;
    out.socket.close(ignored);
    co_return out;
  }
  auto [cec, endpoint] = std::get<0>(std::move(connected));
  if (cec) {
    out.ec = cec;
    out.error_text = go_style(address, "connect", cec);
    co_return out;
  }
  set_nodelay(out.socket);
  co_return out;
}

}  // namespace konn::core::net
