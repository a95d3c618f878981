// handle_bind(): RFC 1928 BIND. The server listens on the address the client reached it on,
// sends a first reply with that listening address, accepts one connection (from the address the
// request named, when it named one), sends a second reply with the peer's address, and relays.

#include <asio/steady_timer.hpp>

#include "core/log/log_macros.h"
#include "core/net/dialer.h"
#include "socks5/session_internal.h"

namespace konn::socks5::detail {

using namespace asio::experimental::awaitable_operators;
using asio::ip::tcp;
using codec::ReplyCode;

core::io::Awaitable<void> handle_bind(tcp::socket& client, const codec::Request& req,
                                      std::vector<uint8_t> early, SessionEnv env, SessionInfo& info,
                                      SessionHandle& handle) {
  auto ex = co_await asio::this_coro::executor;
  const auto& dst = req.destination;
  // The expected peer: an IP literal is checked against the rules and the accepted peer; a name
  // is checked by the rules only (it is not resolved: the peer's address decides).
  asio::ip::address expected = dst.is_domain ? asio::ip::address() : unmap(dst.ip);
  if (!allowed(env, info, "bind", dst.is_domain ? dst.host : "",
               dst.is_domain ? asio::ip::address_v4::any() : expected, dst.port)) {
    info.reason = "denied by rule";
    co_await send_reply(client, info, ReplyCode::NotAllowed);
    co_return;
  }
  std::error_code ec;
  auto local = client.local_endpoint(ec);
  tcp::acceptor acceptor(ex);
  if (!ec) acceptor.open(local.protocol(), ec);
  if (!ec) acceptor.bind(tcp::endpoint(local.address(), 0), ec);
  if (!ec) acceptor.listen(1, ec);
  auto listening = ec ? tcp::endpoint() : acceptor.local_endpoint(ec);
  if (ec) {
    info.reason = "bind listener: " + ec.message();
    co_await send_reply(client, info, ReplyCode::GeneralFailure);
    co_return;
  }
  if (!co_await send_reply(client, info, ReplyCode::Succeeded, listening.address(),
                           listening.port())) {
    info.reason = "client gone before first reply";
    co_return;
  }
  handle.close = [&client, &acceptor] {
    std::error_code ignored;
    client.close(ignored);
    acceptor.close(ignored);
  };
  asio::steady_timer deadline(ex, env.options.connect_timeout);
  auto accepted = co_await (acceptor.async_accept(core::io::use_nothrow) ||
                            deadline.async_wait(core::io::use_nothrow));
  acceptor.close(ec);
  if (accepted.index() == 1) {
    info.reason = "bind: no connection in time";
    co_await send_reply(client, info, ReplyCode::TtlExpired);
    co_return;
  }
  // Named references rather than a structured binding: a lambda below captures `peer`, which
  // clang before 16 cannot do with a binding (the fuzz preset builds with clang-14).
  auto accept_result = std::get<0>(std::move(accepted));
  std::error_code& aec = std::get<0>(accept_result);
  asio::ip::tcp::socket& peer = std::get<1>(accept_result);
  if (aec) {
    info.reason = "bind accept: " + aec.message();
    co_await send_reply(client, info, ReplyCode::GeneralFailure);
    co_return;
  }
  auto peer_ep = peer.remote_endpoint(ec);
  bool expected_any = expected.is_unspecified();
  if (ec || (!expected_any && unmap(peer_ep.address()) != expected)) {
    info.reason = "bind: connection from unexpected " + unmap(peer_ep.address()).to_string();
    co_await send_reply(client, info, ReplyCode::NotAllowed);
    co_return;
  }
  core::net::set_nodelay(peer);
  handle.close = [&client, &peer] {
    std::error_code ignored;
    client.close(ignored);
    peer.close(ignored);
  };
  if (!co_await send_reply(client, info, ReplyCode::Succeeded, peer_ep.address(), peer_ep.port())) {
    info.reason = "client gone before second reply";
    co_return;
  }
  if (!early.empty()) {
    if (!co_await write_all(peer, early)) co_return;
    info.bytes_up += early.size();
  }
  co_await relay_tcp(client, peer, env.options, info);
}

}  // namespace konn::socks5::detail
