// handle_udp_associate(): RFC 1928 UDP ASSOCIATE. One UDP socket faces the client (on the
// address the client reached us on), one per address family faces destinations. Datagrams
// from the client carry the SOCKS header and go out bare; answers come back with a header
// naming their source. FRAG != 0 is dropped (no reassembly, as the RFC allows). The association
// ends when its TCP control connection closes.

#include <array>
#include <optional>

#include <asio/ip/udp.hpp>

#include "core/log/log_macros.h"
#include "socks5/codec/udp_header.h"
#include "socks5/session_internal.h"

namespace konn::socks5::detail {
namespace {

using namespace asio::experimental::awaitable_operators;
using asio::ip::tcp;
using asio::ip::udp;

constexpr size_t kMaxDatagram = 64 * 1024;

const std::shared_ptr<spdlog::logger>& udp_logger() {
  static auto log = core::log::get("socks5.udp");
  return log;
}

struct Association {
  explicit Association(const asio::any_io_executor& ex) : front(ex), out4(ex), out6(ex) {}
  udp::socket front;                    // faces the client
  udp::socket out4;                     // faces IPv4 destinations
  udp::socket out6;                     // faces IPv6 destinations
  asio::ip::address client_ip;          // datagrams are accepted from this address only
  uint16_t client_port = 0;             // ... and this port, when the request named one
  std::optional<udp::endpoint> client;  // where answers go (the client's last source)
  uint64_t dropped = 0;                 // every datagram from the client not forwarded
  uint64_t denied = 0;                  // ... of which denied by a rule (only the first is logged)
};

// Counts a datagram not forwarded.
void drop(Association& as, const SessionEnv& env, Socks5Metrics::UdpDrop reason) {
  ++as.dropped;
  if (reason == Socks5Metrics::UdpDrop::Denied) ++as.denied;
  if (env.metrics != nullptr) env.metrics->udp_dropped(reason);
}

// Waits until the control connection ends (EOF, error or close). Bytes on it are ignored.
core::io::Awaitable<void> control_ended(tcp::socket& control) {
  std::array<char, 256> sink;
  for (;;) {
    auto [ec, n] = co_await control.async_read_some(asio::buffer(sink), core::io::use_nothrow);
    if (ec) co_return;
  }
}

core::io::Awaitable<void> client_to_destinations(Association& as, SessionEnv env,
                                                 SessionInfo& info) {
  using Drop = Socks5Metrics::UdpDrop;
  std::vector<uint8_t> buf(kMaxDatagram);
  for (;;) {
    udp::endpoint from;
    auto [ec, n] =
        co_await as.front.async_receive_from(asio::buffer(buf), from, core::io::use_nothrow);
    if (ec) {
      if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) co_return;
      continue;  // e.g. ICMP port unreachable reported on the socket
    }
    if (unmap(from.address()) != as.client_ip ||
        (as.client_port != 0 && from.port() != as.client_port)) {
      drop(as, env, Drop::ForeignSource);
      continue;
    }
    auto p = codec::parse_udp_datagram(codec::Bytes(buf.data(), n));
    if (p.status != codec::ParseStatus::Complete) {
      drop(as, env, Drop::Malformed);
      continue;
    }
    if (p.value.frag != 0) {
      drop(as, env, Drop::Fragment);  // we do not reassemble
      continue;
    }
    as.client = from;
    const auto& dst = p.value.destination;
    asio::ip::address ip;
    if (dst.is_domain) {
      auto res = co_await env.resolver.resolve(dst.host);
      if (res.ec) {
        drop(as, env, Drop::Resolve);
        continue;
      }
      ip = res.addresses.front();
    } else {
      ip = unmap(dst.ip);
    }
    if (!allowed(env, info, "udp", dst.is_domain ? dst.host : "", ip, dst.port, false,
                 as.denied == 0)) {
      drop(as, env, Drop::Denied);
      continue;
    }
    auto& out = ip.is_v4() ? as.out4 : as.out6;
    if (!out.is_open()) {
      drop(as, env, Drop::NoSocket);
      continue;
    }
    size_t payload = n - p.value.header_size;
    auto [sec, sent] =
        co_await out.async_send_to(asio::buffer(buf.data() + p.value.header_size, payload),
                                   udp::endpoint(ip, dst.port), core::io::use_nothrow);
    if (!sec) {
      info.bytes_up += sent;
      if (info.live != nullptr) info.live->bytes_up.fetch_add(sent, std::memory_order_relaxed);
    }
  }
}

core::io::Awaitable<void> destinations_to_client(Association& as, udp::socket& out,
                                                 SessionInfo& info) {
  if (!out.is_open()) co_return;
  std::vector<uint8_t> buf(kMaxDatagram + 22);
  constexpr size_t kRoom = 22;  // largest header (IPv6), written in front of the payload
  for (;;) {
    udp::endpoint from;
    auto [ec, n] = co_await out.async_receive_from(asio::buffer(buf.data() + kRoom, kMaxDatagram),
                                                   from, core::io::use_nothrow);
    if (ec) {
      if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) co_return;
      continue;
    }
    if (!as.client) continue;
    auto hdr = codec::encode_udp_header(from.address(), from.port());
    std::copy(hdr.begin(), hdr.end(), buf.begin() + static_cast<long>(kRoom - hdr.size()));
    auto [sec, sent] = co_await as.front.async_send_to(
        asio::buffer(buf.data() + kRoom - hdr.size(), hdr.size() + n), *as.client,
        core::io::use_nothrow);
    if (!sec) {
      info.bytes_down += n;
      if (info.live != nullptr) info.live->bytes_down.fetch_add(n, std::memory_order_relaxed);
    }
  }
}

}  // namespace

core::io::Awaitable<void> handle_udp_associate(tcp::socket& client, const codec::Request& req,
                                               SessionEnv env, SessionInfo& info,
                                               SessionHandle& handle) {
  auto ex = co_await asio::this_coro::executor;
  Association as(ex);
  std::error_code ec;
  auto local = client.local_endpoint(ec);
  if (!ec) as.front.open(local.protocol() == tcp::v4() ? udp::v4() : udp::v6(), ec);
  if (!ec) as.front.bind(udp::endpoint(local.address(), 0), ec);
  auto relay_ep = ec ? udp::endpoint() : as.front.local_endpoint(ec);
  if (ec) {
    info.reason = "udp socket: " + ec.message();
    co_await send_reply(client, info, codec::ReplyCode::GeneralFailure);
    co_return;
  }
  std::error_code ignored;
  as.out4.open(udp::v4(), ignored);
  if (!ignored) as.out4.bind(udp::endpoint(udp::v4(), 0), ignored);
  std::error_code v6err;
  as.out6.open(udp::v6(), v6err);
  if (!v6err) as.out6.bind(udp::endpoint(udp::v6(), 0), v6err);
  if (v6err && as.out6.is_open()) as.out6.close(ignored);

  // The request names the client's UDP source; zeros mean "not known yet". We accept datagrams
  // only from the control connection's address either way.
  as.client_ip = unmap(info.client.address());
  if (!req.destination.is_domain) as.client_port = req.destination.port;
  if (!req.destination.is_domain && !req.destination.ip.is_unspecified() &&
      unmap(req.destination.ip) != as.client_ip) {
    KONN_CONN_LOG(udp_logger(), debug, info, "UDP source {} differs from control address; using {}",
                  req.destination.ip.to_string(), as.client_ip.to_string());
  }

  if (!co_await send_reply(client, info, codec::ReplyCode::Succeeded, relay_ep.address(),
                           relay_ep.port())) {
    info.reason = "client gone before reply";
    co_return;
  }
  handle.close = [&client] {
    std::error_code e;
    client.close(e);
  };
  KONN_CONN_LOG(udp_logger(), debug, info, "UDP relay on {}:{}", relay_ep.address().to_string(),
                relay_ep.port());
  co_await (control_ended(client) ||
            (client_to_destinations(as, env, info) && destinations_to_client(as, as.out4, info) &&
             destinations_to_client(as, as.out6, info)));
  info.reason = "control connection closed";
  if (as.dropped > 0) info.reason += ", " + std::to_string(as.dropped) + " datagrams dropped";
  if (as.denied > 0) {
    // The count of what the rate-limited denial log left out.
    info.reason += " (" + std::to_string(as.denied) + " denied by rules, the first one logged)";
  }
}

}  // namespace konn::socks5::detail
