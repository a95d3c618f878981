#include "socks5/session.h"

#include <algorithm>

#include <asio/co_spawn.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include "core/log/log_macros.h"
#include "core/net/dialer.h"
#include "core/net/endpoint.h"
#include "socks5/codec/auth.h"
#include "socks5/codec/greeting.h"
#include "socks5/session_internal.h"

namespace konn::socks5 {

using namespace asio::experimental::awaitable_operators;
using asio::ip::tcp;
using codec::ParseStatus;
using codec::ReplyCode;

namespace {

const std::shared_ptr<spdlog::logger>& session_logger() {
  static auto log = core::log::get("socks5.session");
  return log;
}

// Largest handshake message: a request with a 255-byte name (262 bytes), an RFC 1929 message
// (513 bytes). Anything longer than this without completing a message is not SOCKS.
constexpr size_t kReadChunk = 2048;

// Appends what the socket has (at most kReadChunk bytes) to `buf`; false on EOF or error.
core::io::Awaitable<bool> read_more(tcp::socket& s, std::vector<uint8_t>& buf) {
  size_t old = buf.size();
  buf.resize(old + kReadChunk);
  auto [ec, n] =
      co_await s.async_read_some(asio::buffer(buf.data() + old, kReadChunk), core::io::use_nothrow);
  buf.resize(old + n);
  co_return !ec || n > 0;
}

// Runs on SessionEnv::auth_executor (its own threads), by value: the session may time out and
// leave while the hash is computed.
core::io::Awaitable<bool> verify_password(UserDb* users, std::string user, std::string password) {
  co_return users->verify(user, password);
}

void consume(std::vector<uint8_t>& buf, size_t n) {
  buf.erase(buf.begin(), buf.begin() + static_cast<long>(n));
}

// Greeting, authentication and request. Answers every malformed message as the RFCs say and
// returns nullopt when the session must end (`info.reason` says why).
core::io::Awaitable<std::optional<codec::Request>> handshake(tcp::socket& client,
                                                             std::vector<uint8_t>& buf,
                                                             const SessionEnv& env,
                                                             SessionInfo& info) {
  codec::GreetingParse g;
  while ((g = codec::parse_greeting(buf)).status == ParseStatus::NeedMore) {
    if (!co_await read_more(client, buf)) {
      info.reason = "closed during greeting";
      co_return std::nullopt;
    }
  }
  if (g.status == ParseStatus::Invalid) {
    if (g.error == codec::GreetingError::ZeroMethods) {
      auto sel = codec::encode_method_selection(codec::kMethodNoAcceptable);
      std::vector<uint8_t> out(sel.begin(), sel.end());
      co_await detail::write_all(client, out);
      info.reason = "greeting with zero methods";
    } else {
      info.reason = "not SOCKS5 (version byte " + std::to_string(buf.empty() ? 0 : buf[0]) + ")";
    }
    co_return std::nullopt;
  }
  consume(buf, g.consumed);
  uint8_t method = codec::choose_method(g.value, env.users != nullptr);
  auto sel = codec::encode_method_selection(method);
  std::vector<uint8_t> sel_bytes(sel.begin(), sel.end());
  if (!co_await detail::write_all(client, sel_bytes)) {
    info.reason = "write failed";
    co_return std::nullopt;
  }
  if (method == codec::kMethodNoAcceptable) {
    info.reason = "no acceptable method";
    co_return std::nullopt;
  }

  if (method == codec::kMethodUserPass) {
    codec::UserPassParse a;
    while ((a = codec::parse_user_pass(buf)).status == ParseStatus::NeedMore) {
      if (!co_await read_more(client, buf)) {
        info.reason = "closed during authentication";
        co_return std::nullopt;
      }
    }
    bool ok = false;
    if (a.status == ParseStatus::Complete) {
      ok = co_await asio::co_spawn(env.auth_executor,
                                   verify_password(env.users, a.value.user, a.value.password),
                                   asio::use_awaitable);
    }
    if (a.status == ParseStatus::Complete) info.user = a.value.user;
    auto st = codec::encode_auth_status(ok ? codec::kAuthSuccess : codec::kAuthFailure);
    std::vector<uint8_t> st_bytes(st.begin(), st.end());
    bool written = co_await detail::write_all(client, st_bytes);
    if (!ok) {
      info.reason =
          a.status == ParseStatus::Complete ? "authentication failed" : "malformed authentication";
      KONN_CONN_LOG(session_logger(), warn, info, "{} for user {:?} from {}", info.reason, info.user,
                    info.client.address().to_string());
      co_return std::nullopt;
    }
    if (!written) {
      info.reason = "write failed";
      co_return std::nullopt;
    }
    consume(buf, a.consumed);
  }

  codec::RequestParse r;
  while ((r = codec::parse_request(buf)).status == ParseStatus::NeedMore) {
    if (!co_await read_more(client, buf)) {
      info.reason = "closed during request";
      co_return std::nullopt;
    }
  }
  if (r.status == ParseStatus::Invalid) {
    if (r.reply_code != 0) {
      co_await detail::send_reply(client, info, static_cast<ReplyCode>(r.reply_code));
      info.reason = "bad request";
    } else {
      info.reason = "request with wrong version";
    }
    co_return std::nullopt;
  }
  consume(buf, r.consumed);
  co_return r.value;
}

// The dial_failures_total reason of a failed direct connect.
std::string direct_failure_reason(ReplyCode code, const std::string& reason) {
  if (reason.rfind("resolve ", 0) == 0) return "resolve";
  switch (code) {
    case ReplyCode::NotAllowed:
      return "denied";
    case ReplyCode::ConnectionRefused:
      return "refused";
    case ReplyCode::NetworkUnreachable:
      return "net_unreachable";
    case ReplyCode::HostUnreachable:
      return "host_unreachable";
    case ReplyCode::TtlExpired:
      return "timeout";
    default:
      return "other";
  }
}

struct ConnectOutcome {
  tcp::socket socket;
  ReplyCode code = ReplyCode::GeneralFailure;
  std::string reason;
};

// Resolves (names, through c-ares), applies the rules to each address, and connects to the
// first allowed address that accepts.
core::io::Awaitable<ConnectOutcome> connect_destination(const codec::Address& dst,
                                                        const SessionEnv& env,
                                                        const SessionInfo& info) {
  auto ex = co_await asio::this_coro::executor;
  ConnectOutcome out{tcp::socket(ex), ReplyCode::GeneralFailure, {}};
  std::vector<asio::ip::address> addresses;
  if (dst.is_domain) {
    auto res = co_await env.resolver.resolve(dst.host);
    if (res.ec) {
      out.code = codec::reply_for_error(res.ec);
      out.reason = "resolve " + dst.host + ": " + res.ec.message();
      co_return out;
    }
    addresses = std::move(res.addresses);
  } else {
    addresses.push_back(dst.ip);
  }
  std::vector<asio::ip::address> permitted;
  for (const auto& a : addresses) {
    if (detail::allowed(env, info, "connect", dst.is_domain ? dst.host : "", a, dst.port)) {
      permitted.push_back(a);
    }
  }
  if (permitted.empty()) {
    out.code = ReplyCode::NotAllowed;
    out.reason = "denied by rule";
    co_return out;
  }
  std::error_code last;
  for (const auto& a : permitted) {
    tcp::socket s(ex);
    auto [ec] = co_await s.async_connect(tcp::endpoint(a, dst.port), core::io::use_nothrow);
    if (!ec) {
      core::net::set_nodelay(s);
      out.socket = std::move(s);
      out.code = ReplyCode::Succeeded;
      co_return out;
    }
    last = ec;
  }
  out.code = codec::reply_for_error(last);
  out.reason = "connect: " + last.message();
  co_return out;
}

}  // namespace

namespace detail {

core::io::Awaitable<bool> write_all(tcp::socket& s, const std::vector<uint8_t>& bytes) {
  auto [ec, n] = co_await asio::async_write(s, asio::buffer(bytes), core::io::use_nothrow);
  co_return !ec;
}

core::io::Awaitable<bool> send_reply(tcp::socket& s, SessionInfo& info, ReplyCode code,
                                     asio::ip::address bound, uint16_t port) {
  info.reply = codec::to_string(code);
  info.reply_code = static_cast<int>(code);
  if (info.metrics != nullptr) info.metrics->reply(static_cast<uint8_t>(code));
  // Exception: a named local, not a temporary, crosses the co_await (g++ 12 destroys
  // temporaries of a co_await full-expression twice).
  std::vector<uint8_t> bytes = code == ReplyCode::Succeeded ? codec::encode_reply(code, bound, port)
                                                            : codec::encode_failure(code);
  bool ok = co_await write_all(s, bytes);
  co_return ok;
}

bool allowed(const SessionEnv& env, const SessionInfo& info, const std::string& command,
             const std::string& host, const asio::ip::address& dest, uint16_t port,
             bool dest_unresolved, bool log_denial) {
  RuleQuery q{unmap(info.client.address()),
              info.user == "-" ? "" : info.user,
              host,
              dest,
              port,
              command,
              dest_unresolved};
  auto d = env.options.rule_set.decide(q);
  if (!d.allow && log_denial) {
    KONN_CONN_LOG(session_logger(), warn, info, "denied {} to {} port {} for client {} user {} by {} {:?}",
                  command,
                  host.empty()      ? unmap(dest).to_string()
                  : dest_unresolved ? host + " (unresolved)"
                                    : host + " (" + unmap(dest).to_string() + ")",
                  port, unmap(info.client.address()).to_string(), info.user,
                  d.rule_index < 0 ? std::string("policy") : "rule " + std::to_string(d.rule_index),
                  d.rule_text);
  }
  return d.allow;
}

ReplyCode reply_for_dial_failure(core::konnectivity::DialFailure f) {
  using core::konnectivity::DialFailure;
  switch (f) {
    case DialFailure::None:
      return ReplyCode::Succeeded;
    case DialFailure::Refused:
      return ReplyCode::ConnectionRefused;
    case DialFailure::NetUnreachable:
      return ReplyCode::NetworkUnreachable;
    case DialFailure::HostUnreachable:
      return ReplyCode::HostUnreachable;
    case DialFailure::Timeout:
      return ReplyCode::TtlExpired;
    // No agent serves that destination: from the client's side the host cannot be reached.
    case DialFailure::NoAgent:
      return ReplyCode::HostUnreachable;
    case DialFailure::ProxyUnavailable:
    case DialFailure::Other:
      return ReplyCode::GeneralFailure;
  }
  return ReplyCode::GeneralFailure;
}

namespace {

// CONNECT through the Konnectivity upstream: rules, dial (a name is sent unresolved, so the agent
// resolves it in the cluster), reply, relay.
core::io::Awaitable<void> connect_through_konnectivity(tcp::socket& client,
                                                       const codec::Request& req,
                                                       std::vector<uint8_t> early, SessionEnv env,
                                                       SessionInfo& info, SessionHandle& handle) {
  const auto& dst = req.destination;
  bool permitted =
      dst.is_domain ? allowed(env, info, "connect", dst.host, asio::ip::address(), dst.port, true)
                    : allowed(env, info, "connect", "", dst.ip, dst.port);
  if (!permitted) {
    info.reason = "denied by rule";
    if (env.metrics != nullptr) env.metrics->dial_failure("konnectivity", "denied");
    co_await send_reply(client, info, ReplyCode::NotAllowed);
    co_return;
  }
  std::string address =
      core::net::HostPort{dst.is_domain ? dst.host : unmap(dst.ip).to_string(), dst.port}
          .to_string();
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(env.options.connect_timeout);
  auto r = co_await env.konnectivity->dial(address, timeout);
  if (!r.tunnel) {
    info.reason = std::string("konnectivity: ") + r.error.text;
    if (env.metrics != nullptr) {
      env.metrics->dial_failure("konnectivity", core::konnectivity::to_string(r.error.failure));
    }
    co_await send_reply(client, info, reply_for_dial_failure(r.error.failure));
    co_return;
  }
  auto& tunnel = *r.tunnel;
  handle.close = [&client, &tunnel] {
    std::error_code ignored;
    client.close(ignored);
    tunnel.close(ignored);
  };
  // The agent's outbound address is not carried by the protocol: BND is 0.0.0.0:0.
  if (!co_await send_reply(client, info, ReplyCode::Succeeded, asio::ip::address_v4::any(), 0)) {
    info.reason = "client gone before reply";
    co_return;
  }
  if (!early.empty()) {
    auto [ec, n] = co_await asio::async_write(tunnel, asio::buffer(early), core::io::use_nothrow);
    if (ec) {
      info.reason = "upstream write failed";
      co_return;
    }
    info.bytes_up += early.size();
  }
  early = {};
  if (!tunnel.early_bytes().empty()) {
    // Destination bytes that came with the proxy-server's 200 (a server that speaks first).
    std::string first = std::move(tunnel.early_bytes());
    auto [ec, n] = co_await asio::async_write(client, asio::buffer(first), core::io::use_nothrow);
    if (ec) {
      info.reason = "client write failed";
      co_return;
    }
    info.bytes_down += first.size();
  }
  co_await relay_tunnel(client, tunnel, env.options, info);
  handle.close = nullptr;
}

}  // namespace

core::io::Awaitable<void> handle_connect(tcp::socket& client, const codec::Request& req,
                                         std::vector<uint8_t> early, SessionEnv env,
                                         SessionInfo& info, SessionHandle& handle) {
  if (env.konnectivity != nullptr) {
    co_await connect_through_konnectivity(client, req, std::move(early), env, info, handle);
    co_return;
  }
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer deadline(ex, env.options.connect_timeout);
  auto result = co_await (connect_destination(req.destination, env, info) ||
                          deadline.async_wait(core::io::use_nothrow));
  if (result.index() == 1) {
    info.reason = "connect timeout";
    if (env.metrics != nullptr) env.metrics->dial_failure("direct", "timeout");
    co_await send_reply(client, info, ReplyCode::TtlExpired);
    co_return;
  }
  auto outcome = std::get<0>(std::move(result));
  if (outcome.code != ReplyCode::Succeeded) {
    info.reason = outcome.reason;
    if (env.metrics != nullptr)
      env.metrics->dial_failure("direct", direct_failure_reason(outcome.code, outcome.reason));
    co_await send_reply(client, info, outcome.code);
    co_return;
  }
  tcp::socket upstream = std::move(outcome.socket);
  handle.close = [&client, &upstream] {
    std::error_code ignored;
    client.close(ignored);
    upstream.close(ignored);
  };
  std::error_code ec;
  auto bound = upstream.local_endpoint(ec);
  // The success reply is sent only now, after the destination accepted, with the address the
  // destination sees us as (what the RFC asks and `ssh -D` does not do).
  if (ec ||
      !co_await send_reply(client, info, ReplyCode::Succeeded, bound.address(), bound.port())) {
    info.reason = "client gone before reply";
    co_return;
  }
  if (!early.empty()) {
    // Bytes the client sent together with its request (optimistic clients).
    if (!co_await write_all(upstream, early)) {
      info.reason = "upstream write failed";
      co_return;
    }
    info.bytes_up += early.size();
  }
  early = {};
  co_await relay_tcp(client, upstream, env.options, info);
}

}  // namespace detail

core::io::Awaitable<void> run_session(tcp::socket client, SessionEnv env,
                                      std::unique_ptr<SessionRegistry::Slot> slot) {
  SessionInfo info;
  info.id = slot->id();
  info.metrics = env.metrics;
  if (env.metrics != nullptr) env.metrics->session_opened();
  std::error_code ec;
  info.client = client.remote_endpoint(ec);
  core::net::set_nodelay(client);
  SessionHandle& handle = slot->handle();
  info.live = &handle;
  handle.close = [&client] {
    std::error_code ignored;
    client.close(ignored);
  };

  auto ex = co_await asio::this_coro::executor;
  std::vector<uint8_t> buf;
  buf.reserve(kReadChunk);
  asio::steady_timer deadline(ex, env.options.handshake_timeout);
  auto hs =
      co_await (handshake(client, buf, env, info) || deadline.async_wait(core::io::use_nothrow));
  std::optional<codec::Request> req;
  if (hs.index() == 1) {
    info.reason = "handshake timeout";
  } else {
    req = std::get<0>(std::move(hs));
  }
  if (req) {
    info.command = codec::to_string(req->command);
    info.destination = req->destination.to_string();
    {
      std::lock_guard lock(handle.mu);
      handle.command = info.command;
      handle.destination = info.destination;
      handle.via = env.konnectivity != nullptr && req->command == codec::Command::Connect
                       ? "konnectivity"
                       : "direct";
    }
    if (env.metrics != nullptr) env.metrics->request(info.command);
    if (env.konnectivity != nullptr && req->command != codec::Command::Connect) {
      // Konnectivity carries TCP streams to a destination only: no listening socket on the
      // agent's side (BIND) and no datagrams (UDP ASSOCIATE).
      info.reason = std::string(codec::to_string(req->command)) +
                    " is not possible through the Konnectivity upstream";
      co_await detail::send_reply(client, info, ReplyCode::CommandNotSupported);
      req.reset();
    }
  }
  if (req) {
    switch (req->command) {
      case codec::Command::Connect:
        co_await detail::handle_connect(client, *req, std::move(buf), env, info, handle);
        break;
      case codec::Command::Bind:
        if (env.options.enable_bind) {
          co_await detail::handle_bind(client, *req, std::move(buf), env, info, handle);
        } else {
          info.reason = "BIND disabled";
          co_await detail::send_reply(client, info, ReplyCode::CommandNotSupported);
        }
        break;
      case codec::Command::UdpAssociate:
        if (env.options.enable_udp) {
          co_await detail::handle_udp_associate(client, *req, env, info, handle);
        } else {
          info.reason = "UDP ASSOCIATE disabled";
          co_await detail::send_reply(client, info, ReplyCode::CommandNotSupported);
        }
        break;
    }
  }
  handle.close = nullptr;
  client.close(ec);
  if (env.metrics != nullptr) env.metrics->session_closed(info.bytes_up, info.bytes_down);
  bool refused_reply = info.reply_code > 0;  // any REP but 00 (succeeded)
  if (refused_reply || info.reason == "authentication failed" ||
      info.reason == "no acceptable method" || info.reason == "handshake timeout") {
    slot->registry().record_failure(
        {std::chrono::system_clock::now(),
         handle.client.to_string() + ":" + std::to_string(handle.client_port), info.command,
         info.destination, info.reply_code, info.reply, info.reason});
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                  info.start)
                .count();
  KONN_CONN_LOG(session_logger(), info, info,
                "close client={} user={} cmd={} dst={} reply={} up={} down={} duration={}ms "
                "reason={:?}",
                info.client.address().to_string() + ":" + std::to_string(info.client.port()),
                info.user, info.command, info.destination, info.reply, info.bytes_up,
                info.bytes_down, ms, info.reason);
}

// ---- SessionRegistry ----

std::unique_ptr<SessionRegistry::Slot> SessionRegistry::admit(const asio::ip::address& client,
                                                              asio::any_io_executor ex,
                                                              Refusal* refusal,
                                                              uint16_t client_port) {
  auto key = detail::unmap(client).to_string();
  std::lock_guard lock(mu_);
  if (max_total_ > 0 && sessions_.size() >= static_cast<size_t>(max_total_)) {
    *refusal = {"max_sessions", "max-sessions " + std::to_string(max_total_) + " reached"};
    return nullptr;
  }
  int& n = per_client_[key];
  if (max_per_client_ > 0 && n >= max_per_client_) {
    *refusal = {
        "max_sessions_per_client",
        "max-sessions-per-client " + std::to_string(max_per_client_) + " reached for " + key};
    if (n == 0) per_client_.erase(key);
    return nullptr;
  }
  ++n;
  uint64_t id = next_id_++;
  auto handle = std::make_shared<SessionHandle>();
  handle->executor = std::move(ex);
  handle->client = detail::unmap(client);
  handle->client_port = client_port;
  sessions_[id] = handle;
  return std::make_unique<Slot>(*this, id, detail::unmap(client), std::move(handle));
}

void SessionRegistry::release(uint64_t id, const asio::ip::address& client) {
  std::lock_guard lock(mu_);
  sessions_.erase(id);
  auto it = per_client_.find(client.to_string());
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
}

std::vector<std::shared_ptr<const SessionHandle>> SessionRegistry::snapshot(
    size_t* most_per_client) const {
  std::vector<std::shared_ptr<const SessionHandle>> out;
  std::lock_guard lock(mu_);
  out.reserve(sessions_.size());
  for (const auto& [id, weak] : sessions_) {
    if (auto h = weak.lock()) out.push_back(std::move(h));
  }
  size_t most = 0;
  for (const auto& [client, n] : per_client_) most = std::max(most, static_cast<size_t>(n));
  if (most_per_client != nullptr) *most_per_client = most;
  return out;
}

size_t SessionRegistry::active() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

void SessionRegistry::close_all() {
  std::lock_guard lock(mu_);
  for (auto& [id, weak] : sessions_) {
    if (auto h = weak.lock()) {
      asio::post(h->executor, [h] {
        if (h->close) h->close();
      });
    }
  }
}

}  // namespace konn::socks5
