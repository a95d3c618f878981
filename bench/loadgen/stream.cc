#include "bench/loadgen/stream.h"

#include <array>
#include <cstring>
#include <stdexcept>
#include <tuple>

#include "bench/loadgen/grpc_tunnel.h"
#include "core/konnectivity/connect_reply.h"
#include "core/net/endpoint.h"
#include "test-client/channel.h"

namespace konn::bench {

using asio::ip::tcp;
using core::io::use_nothrow;
using Unix = asio::local::stream_protocol;

namespace {

// A connected socket (TCP or unix), with bytes a handshake read past its answer kept in front.
template <typename Socket>
class SocketStream final : public Stream {
 public:
  SocketStream(Socket s, std::string leftover) : s_(std::move(s)), leftover_(std::move(leftover)) {}

  Awaitable<std::pair<std::error_code, size_t>> read_some(asio::mutable_buffer b) override {
    if (!leftover_.empty()) {
      size_t n = std::min(b.size(), leftover_.size());
      std::memcpy(b.data(), leftover_.data(), n);
      leftover_.erase(0, n);
      co_return std::make_pair(std::error_code(), n);
    }
    auto [ec, n] = co_await s_.async_read_some(b, use_nothrow);
    co_return std::make_pair(std::error_code(ec), n);
  }
  Awaitable<std::error_code> write(asio::const_buffer b) override {
    auto [ec, n] = co_await asio::async_write(s_, b, use_nothrow);
    co_return ec;
  }
  Awaitable<std::error_code> close() override {
    std::error_code ec;
    s_.close(ec);
    co_return ec;
  }
  Awaitable<void> reset() override {
    std::error_code ec;
    s_.set_option(asio::socket_base::linger(true, 0), ec);
    s_.close(ec);
    co_return;
  }

 private:
  Socket s_;
  std::string leftover_;
};

std::pair<std::string, uint16_t> split_host_port(const std::string& hp) {
  auto parsed = core::net::parse_host_port(hp);
  if (!parsed || parsed->port == 0) throw std::invalid_argument("bad host:port '" + hp + "'");
  return {parsed->host, parsed->port};
}

template <typename Socket>
Awaitable<std::error_code> read_exact(Socket& s, void* p, size_t n) {
  auto [ec, got] = co_await asio::async_read(s, asio::buffer(p, n), use_nothrow);
  co_return ec;
}

// SOCKS5: greeting (no authentication), then CONNECT to an IPv4 destination; each message waits
// for the previous answer (microsocks reads them one by one).
Awaitable<std::string> socks5_handshake(tcp::socket& s, const std::string& target) {
  auto [host, port] = split_host_port(target);
  std::error_code ec;
  auto ip = asio::ip::make_address_v4(host, ec);
  if (ec) co_return "socks5: target must be an IPv4 address";
  const std::array<uint8_t, 3> greet{5, 1, 0};
  if (auto [wec, n] = co_await asio::async_write(s, asio::buffer(greet), use_nothrow); wec) {
    co_return "socks5 greeting: " + wec.message();
  }
  std::array<uint8_t, 2> method{};
  if (auto rec = co_await read_exact(s, method.data(), method.size())) {
    co_return "socks5 method: " + rec.message();
  }
  if (method[0] != 5 || method[1] != 0) co_return "socks5: no acceptable method";
  auto b = ip.to_bytes();
  const std::array<uint8_t, 10> req{5,
                                    1,
                                    0,
                                    1,
                                    b[0],
                                    b[1],
                                    b[2],
                                    b[3],
                                    static_cast<uint8_t>(port >> 8),
                                    static_cast<uint8_t>(port & 0xff)};
  if (auto [wec, n] = co_await asio::async_write(s, asio::buffer(req), use_nothrow); wec) {
    co_return "socks5 request: " + wec.message();
  }
  std::array<uint8_t, 4> head{};
  if (auto rec = co_await read_exact(s, head.data(), head.size())) {
    co_return "socks5 reply: " + rec.message();
  }
  if (head[1] != 0) co_return "socks5: reply " + std::to_string(head[1]);
  size_t rest = head[3] == 1 ? 4 + 2 : head[3] == 4 ? 16 + 2 : 0;
  std::array<uint8_t, 258> addr{};
  if (head[3] == 3) {
    if (auto rec = co_await read_exact(s, addr.data(), 1))
      co_return "socks5 reply: " + rec.message();
    rest = size_t{addr[0]} + 2;
  }
  if (rest == 0) co_return "socks5: bad address type in reply";
  if (auto rec = co_await read_exact(s, addr.data(), rest)) {
    co_return "socks5 reply: " + rec.message();
  }
  co_return "";
}

// HTTP CONNECT: request, then the answer's head; bytes past the head go to *leftover.
template <typename Socket>
Awaitable<std::string> connect_handshake(Socket& s, const std::string& target,
                                         std::string* leftover) {
  std::string req = "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n";
  if (auto [ec, n] = co_await asio::async_write(s, asio::buffer(req), use_nothrow); ec) {
    co_return "CONNECT request: " + ec.message();
  }
  core::konnectivity::ConnectReply reply;
  std::array<char, 1024> buf{};
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_nothrow);
    switch (ec ? reply.finish() : reply.feed(std::string_view(buf.data(), n))) {
      case core::konnectivity::ConnectReply::Status::Established:
        *leftover = reply.leftover();
        co_return "";
      case core::konnectivity::ConnectReply::Status::Failed:
        co_return "CONNECT refused: " + reply.describe();
      case core::konnectivity::ConnectReply::Status::Invalid:
        co_return "CONNECT answer: " + reply.error();
      case core::konnectivity::ConnectReply::Status::NeedMore:
        if (ec) co_return "CONNECT answer: " + ec.message();
        break;
    }
  }
}

}  // namespace

Via Via::parse(const std::string& text) {
  Via v;
  auto strip = [&](const std::string& prefix) -> std::string {
    return text.compare(0, prefix.size(), prefix) == 0 ? text.substr(prefix.size()) : "";
  };
  if (text == "direct") return v;
  if (auto rest = strip("socks5://"); !rest.empty()) {
    v.kind = Kind::Socks5;
    std::tie(v.host, v.port) = split_host_port(rest);
  } else if (auto crest = strip("connect://"); !crest.empty()) {
    v.kind = Kind::Connect;
    std::tie(v.host, v.port) = split_host_port(crest);
  } else if (auto urest = strip("connect+unix://"); !urest.empty()) {
    v.kind = Kind::ConnectUnix;
    v.path = urest;
  } else if (auto grest = strip("grpc+unix://"); !grest.empty()) {
    v.kind = Kind::GrpcUnix;
    v.path = grest;
  } else {
    throw std::invalid_argument("--via: unknown '" + text +
                                "' (direct, socks5://H:P, connect://H:P, connect+unix:///PATH, "
                                "grpc+unix:///PATH)");
  }
  return v;
}

std::string Via::to_string() const {
  switch (kind) {
    case Kind::Direct:
      return "direct";
    case Kind::Socks5:
      return "socks5://" + host + ":" + std::to_string(port);
    case Kind::Connect:
      return "connect://" + host + ":" + std::to_string(port);
    case Kind::ConnectUnix:
      return "connect+unix://" + path;
    case Kind::GrpcUnix:
      return "grpc+unix://" + path;
  }
  return "?";
}

Opener::Opener(Via via) : via_(std::move(via)) {
  if (via_.kind == Via::Kind::GrpcUnix) {
    for (int i = 0; i < std::max(1, via_.grpc_channels); ++i) {
      testclient::ChannelConfig cfg;
      cfg.uds_path = via_.path;
      auto channel = testclient::make_channel(cfg);
      if (!testclient::wait_connected(channel, std::chrono::seconds(10))) {
        throw std::runtime_error("cannot reach the gRPC frontend at " + via_.path);
      }
      stubs_.push_back(ProxyService::NewStub(channel));
    }
  }
}

Opener::~Opener() = default;

Awaitable<std::pair<std::unique_ptr<Stream>, std::string>> Opener::open(const std::string& target) {
  auto ex = co_await asio::this_coro::executor;
  std::pair<std::unique_ptr<Stream>, std::string> result;
  switch (via_.kind) {
    case Via::Kind::GrpcUnix: {
      auto& stub = *stubs_[next_channel_.fetch_add(1) % stubs_.size()];
      co_return co_await GrpcTunnel::dial(stub, target);
    }
    case Via::Kind::ConnectUnix: {
      Unix::socket s(ex);
      const Unix::endpoint ep(via_.path);
      if (auto [ec] = co_await s.async_connect(ep, use_nothrow); ec) {
        result.second = "connect " + via_.path + ": " + ec.message();
        co_return result;
      }
      std::string leftover;
      result.second = co_await connect_handshake(s, target, &leftover);
      if (result.second.empty()) {
        result.first = std::make_unique<SocketStream<Unix::socket>>(std::move(s), leftover);
      }
      co_return result;
    }
    default:
      break;
  }
  auto [host, port] = via_.kind == Via::Kind::Direct ? split_host_port(target)
                                                     : std::make_pair(via_.host, via_.port);
  std::error_code aec;
  const tcp::endpoint ep(asio::ip::make_address(host, aec), port);
  if (aec) {
    result.second = "bad address " + host;
    co_return result;
  }
  tcp::socket s(ex);
  if (auto [ec] = co_await s.async_connect(ep, use_nothrow); ec) {
    result.second = "connect " + host + ":" + std::to_string(port) + ": " + ec.message();
    co_return result;
  }
  s.set_option(tcp::no_delay(true));
  std::string leftover;
  if (via_.kind == Via::Kind::Socks5) {
    result.second = co_await socks5_handshake(s, target);
  } else if (via_.kind == Via::Kind::Connect) {
    result.second = co_await connect_handshake(s, target, &leftover);
  }
  if (result.second.empty()) {
    result.first = std::make_unique<SocketStream<tcp::socket>>(std::move(s), leftover);
  }
  co_return result;
}

}  // namespace konn::bench
