#include "core/h2/h2_test_peer.h"

#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdexcept>

#include <asio/connect.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "tests/support/test_certs.h"

namespace konn::core::h2::testing {

H2Server::H2Server(Kind kind, Connection::CallHandler handler, ConnectionOptions options,
                   const std::string& unix_path)
    : kind_(kind),
      handler_(std::move(handler)),
      options_(std::move(options)),
      unix_path_(unix_path) {
  if (kind_ == Kind::Unix) {
    unix_.emplace(loop_.ctx(), asio::local::stream_protocol::endpoint(unix_path_));
  } else {
    tcp_.emplace(loop_.ctx(), asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port_ = tcp_->local_endpoint().port();
  }
  if (kind_ == Kind::Tls) {
    const auto& certs = testsupport::test_certs();
    tls_ = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    tls_->use_certificate_chain_file(certs.server_crt);
    tls_->use_private_key_file(certs.server_key, asio::ssl::context::pem);
    enable_h2_alpn(*tls_);
  }
  loop_.run([this] {
    accept();
    return 0;
  });
}

H2Server::~H2Server() {
  loop_.run([this] {
    if (tcp_) tcp_->close();
    if (unix_) unix_->close();
    std::vector<std::shared_ptr<Connection>> conns;
    {
      std::lock_guard lock(mu_);
      conns = conns_;
    }
    for (auto& c : conns) c->close("test server stops");
    return 0;
  });
}

std::string H2Server::target() const {
  return kind_ == Kind::Unix ? "unix:" + unix_path_ : "127.0.0.1:" + std::to_string(port_);
}

std::vector<std::string> H2Server::close_reasons() {
  std::lock_guard lock(mu_);
  return reasons_;
}

std::vector<std::shared_ptr<Connection>> H2Server::connections() {
  std::lock_guard lock(mu_);
  return conns_;
}

void H2Server::add(std::unique_ptr<Transport> t) {
  ++accepted_;
  auto opts = options_;
  opts.log_name = "[test-server C" + std::to_string(accepted_) + "]";
  auto conn = Connection::create(Connection::Role::Server, std::move(t), opts);
  conn->set_call_handler(handler_);
  conn->set_on_close([this](const std::string& reason) {
    std::lock_guard lock(mu_);
    reasons_.push_back(reason);
  });
  {
    std::lock_guard lock(mu_);
    conns_.push_back(conn);
  }
  conn->start();
}

void H2Server::accept() {
  if (unix_) {
    unix_->async_accept([this](std::error_code ec, asio::local::stream_protocol::socket s) {
      if (ec) return;
      add(std::make_unique<UnixTransport>(std::move(s)));
      accept();
    });
    return;
  }
  tcp_->async_accept([this](std::error_code ec, asio::ip::tcp::socket s) {
    if (ec) return;
    s.set_option(asio::ip::tcp::no_delay(true));
    if (kind_ == Kind::Tls) {
      add(std::make_unique<TcpTlsTransport>(std::move(s), *tls_));
    } else {
      add(std::make_unique<TcpTransport>(std::move(s)));
    }
    accept();
  });
}

std::shared_ptr<Connection> connect_client(Loop& loop, Kind kind, const std::string& target,
                                           ConnectionOptions options) {
  std::unique_ptr<Transport> t;
  if (kind == Kind::Unix) {
    asio::local::stream_protocol::socket s(loop.ctx());
    s.connect(asio::local::stream_protocol::endpoint(target));
    t = std::make_unique<UnixTransport>(std::move(s));
  } else {
    const auto colon = target.rfind(':');
    asio::ip::tcp::socket s(loop.ctx());
    s.connect({asio::ip::make_address(target.substr(0, colon)),
               static_cast<uint16_t>(std::stoi(target.substr(colon + 1)))});
    s.set_option(asio::ip::tcp::no_delay(true));
    if (kind == Kind::Tls) {
      // Exception: `new`, never deleted: one client context for the whole test process, so it
      // outlives every stream made from it.
      static asio::ssl::context* tls = [] {
        auto* c = new asio::ssl::context(asio::ssl::context::tls_client);
        c->load_verify_file(testsupport::test_certs().ca_crt);
        c->set_verify_mode(asio::ssl::verify_peer);
        return c;
      }();
      t = std::make_unique<TcpTlsTransport>(std::move(s), *tls);
    } else {
      t = std::make_unique<TcpTransport>(std::move(s));
    }
  }
  options.scheme = kind == Kind::Tls ? "https" : "http";
  options.log_name = "[test-client]";
  auto conn = Connection::create(Connection::Role::Client, std::move(t), options);
  loop.run([&] {
    conn->start();
    return 0;
  });
  return conn;
}

ClientCall::ClientCall(Loop& loop, const std::shared_ptr<Connection>& conn, const std::string& path,
                       const Metadata& md, std::optional<std::chrono::milliseconds> timeout)
    : loop_(loop) {
  stream_ = loop_.run([&] {
    StreamCallbacks cb;
    cb.on_headers = [this](const Metadata& h) {
      std::lock_guard lock(mu_);
      result_.headers = h;
    };
    cb.on_message = [this](std::string&& m) {
      std::lock_guard lock(mu_);
      result_.messages.push_back(std::move(m));
      cv_.notify_all();
    };
    cb.on_end = [this](const GrpcStatus& st, const Metadata& trailers) {
      std::lock_guard lock(mu_);
      result_.status = st;
      result_.trailers = trailers;
      ended_ = true;
      cv_.notify_all();
    };
    return conn->start_call(path, md, std::move(cb), timeout);
  });
}

ClientCall::~ClientCall() {
  if (stream_) {
    loop_.run([&] {
      stream_->set_callbacks({});
      return 0;
    });
  }
}

void ClientCall::send(const std::string& m) {
  loop_.run([&] { return stream_->send_message(m); });
}
void ClientCall::send_framed(std::string head, std::string_view borrowed) {
  loop_.run([&] { return stream_->send_framed(std::move(head), borrowed); });
}
void ClientCall::half_close() {
  loop_.run([&] {
    stream_->half_close();
    return 0;
  });
}
void ClientCall::cancel() {
  loop_.run([&] {
    stream_->cancel();
    return 0;
  });
}

bool ClientCall::wait_messages(size_t n, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return result_.messages.size() >= n || ended_; }) &&
         result_.messages.size() >= n;
}

std::optional<CallResult> ClientCall::wait_end(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return ended_; })) return std::nullopt;
  return result_;
}

std::vector<std::string> ClientCall::messages() {
  std::lock_guard lock(mu_);
  return result_.messages;
}

std::string frame_header(uint8_t type, uint8_t flags, uint32_t stream_id, uint32_t length) {
  return std::string{static_cast<char>(length >> 16),    static_cast<char>(length >> 8),
                     static_cast<char>(length),          static_cast<char>(type),
                     static_cast<char>(flags),           static_cast<char>(stream_id >> 24),
                     static_cast<char>(stream_id >> 16), static_cast<char>(stream_id >> 8),
                     static_cast<char>(stream_id)};
}

std::string frame(uint8_t type, uint8_t flags, uint32_t stream_id, std::string_view payload) {
  return frame_header(type, flags, stream_id, static_cast<uint32_t>(payload.size()))
      .append(payload);
}

namespace {

// An HPACK string length: an integer with a 7-bit prefix, no Huffman (RFC 7541 5.1, 5.2).
void hpack_length(std::string& out, size_t v) {
  if (v < 127) {
    out += static_cast<char>(v);
    return;
  }
  out += '\x7f';
  for (v -= 127; v >= 128; v /= 128) out += static_cast<char>(v % 128 + 128);
  out += static_cast<char>(v);
}

}  // namespace

std::string hpack_literal(std::string_view name, std::string_view value) {
  std::string out(1, '\0');
  hpack_length(out, name.size());
  out += name;
  hpack_length(out, value.size());
  out += value;
  return out;
}

std::string grpc_request_block(const std::string& path, std::string_view authority) {
  std::string b;
  b += '\x83';  // :method POST
  b += '\x86';  // :scheme http
  b += hpack_literal(":path", path);
  b += hpack_literal(":authority", authority);
  b += hpack_literal("content-type", "application/grpc");
  b += hpack_literal("te", "trailers");
  return b;
}

Packet data_packet(int64_t connect_id, const std::string& bytes) {
  Packet p;
  p.set_type(DATA);
  p.mutable_data()->set_connectid(connect_id);
  p.mutable_data()->set_data(bytes);
  return p;
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::vector<FrameHead> frames_of(std::string_view w) {
  std::vector<FrameHead> out;
  for (size_t i = 0; i + 9 <= w.size();) {
    const auto* p = reinterpret_cast<const uint8_t*>(w.data() + i);
    FrameHead f{
        p[3], p[4],
        (uint32_t{p[5]} << 24 | uint32_t{p[6]} << 16 | uint32_t{p[7]} << 8 | p[8]) & 0x7fffffffu,
        size_t{p[0]} << 16 | size_t{p[1]} << 8 | p[2]};
    out.push_back(f);
    i += 9 + f.length;
  }
  return out;
}

RawPeer::RawPeer(uint16_t port) : socket_(ctx_) {
  socket_.connect({asio::ip::make_address("127.0.0.1"), port});
}

RawPeer::RawPeer(asio::ip::tcp::socket s) : socket_(ctx_) {
  socket_.assign(asio::ip::tcp::v4(), s.release());
}

RawPeer::~RawPeer() {
  if (inflater_ != nullptr) nghttp2_hd_inflate_del(inflater_);
}

Metadata RawPeer::decode_headers(const RawFrame& f) {
  if (inflater_ == nullptr) nghttp2_hd_inflate_new(&inflater_);
  std::string block = f.payload;
  size_t skip = 0;
  if ((f.flags & 0x8) != 0) {  // PADDED
    const size_t pad = static_cast<unsigned char>(block[0]);
    block = block.substr(1, block.size() - 1 - pad);
  }
  if ((f.flags & 0x20) != 0) skip = 5;  // PRIORITY
  Metadata out;
  const auto* in = reinterpret_cast<const uint8_t*>(block.data()) + skip;
  size_t left = block.size() - skip;
  while (true) {
    nghttp2_nv nv;
    int flags = 0;
    const auto n = nghttp2_hd_inflate_hd2(inflater_, &nv, &flags, in, left, 1);
    if (n < 0) throw std::runtime_error("HPACK decoding failed");
    in += n;
    left -= static_cast<size_t>(n);
    if ((flags & NGHTTP2_HD_INFLATE_EMIT) != 0) {
      out.emplace_back(std::string(reinterpret_cast<const char*>(nv.name), nv.namelen),
                       std::string(reinterpret_cast<const char*>(nv.value), nv.valuelen));
    }
    if ((flags & NGHTTP2_HD_INFLATE_FINAL) != 0) {
      nghttp2_hd_inflate_end_headers(inflater_);
      break;
    }
    if (n == 0 && left == 0) break;
  }
  return out;
}

void RawPeer::write(const std::string& bytes) { asio::write(socket_, asio::buffer(bytes)); }

bool RawPeer::read_exact(char* p, size_t n, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t got = 0;
  while (got < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{socket_.native_handle(), POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) return false;
    std::error_code ec;
    const size_t r = socket_.read_some(asio::buffer(p + got, n - got), ec);
    if (ec) return false;
    got += r;
  }
  return true;
}

std::optional<RawFrame> RawPeer::read_frame(std::chrono::milliseconds timeout) {
  char h[9];
  if (!read_exact(h, 9, timeout)) return std::nullopt;
  auto u = [&](int i) { return static_cast<uint32_t>(static_cast<unsigned char>(h[i])); };
  RawFrame f;
  const uint32_t len = u(0) << 16 | u(1) << 8 | u(2);
  f.type = static_cast<uint8_t>(u(3));
  f.flags = static_cast<uint8_t>(u(4));
  f.stream_id = (u(5) & 0x7f) << 24 | u(6) << 16 | u(7) << 8 | u(8);
  f.payload.resize(len);
  if (len > 0 && !read_exact(f.payload.data(), len, timeout)) return std::nullopt;
  return f;
}

std::optional<RawFrame> RawPeer::read_until(uint8_t type, std::chrono::milliseconds timeout) {
  while (auto f = read_frame(timeout)) {
    if (f->type == type) return f;
  }
  return std::nullopt;
}

bool RawPeer::wait_eof(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{socket_.native_handle(), POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) return false;
    std::error_code ec;
    socket_.read_some(asio::buffer(buf), ec);
    if (ec) return true;
  }
}

}  // namespace konn::core::h2::testing
