#include "bench/fleet/fleet_sim.h"

#include <deque>
#include <netinet/in.h>
#include <sys/socket.h>
#include <utility>

#include <asio/connect.hpp>
#include <asio/write.hpp>

#include "core/h2/transport.h"
#include "core/tunnel/packet.h"
#include "konnectivity/client.pb.h"

namespace konn::bench::fleet {

namespace h2 = core::h2;
using std::chrono::milliseconds;
using core::tunnel::make_close_response;
using core::tunnel::make_data;
using core::tunnel::make_dial_response;
using core::tunnel::make_drain;

UpstreamBackoff::UpstreamBackoff(milliseconds initial, milliseconds cap, uint64_t seed)
    : initial_(initial), cap_(cap), current_(initial), rng_(seed) {}

milliseconds UpstreamBackoff::jittered(milliseconds d) {
  std::uniform_real_distribution<double> u(0.0, 0.1);
  return milliseconds(static_cast<int64_t>(static_cast<double>(d.count()) * (1.0 + u(rng_))));
}

milliseconds UpstreamBackoff::first() {
  // The sync loop ticks every `initial` (jittered): a lost connection is noticed at the next
  // tick, anywhere in that period.
  std::uniform_real_distribution<double> u(0.0, 1.1);
  return milliseconds(static_cast<int64_t>(static_cast<double>(initial_.count()) * u(rng_)));
}

milliseconds UpstreamBackoff::next() {
  milliseconds d = jittered(current_);
  current_ = std::min(
      cap_, milliseconds(static_cast<int64_t>(static_cast<double>(current_.count()) * 1.5)));
  return std::min(d, cap_ + cap_ / 10);
}

std::string agent_ipv4(uint64_t index) {
  const uint64_t v = index + 1;
  return "10." + std::to_string((v >> 16) & 255) + "." + std::to_string((v >> 8) & 255) + "." +
         std::to_string(v & 255);
}

std::string agent_identifiers(uint64_t index) {
  return "host=node-" + std::to_string(index) + "&ipv4=" + agent_ipv4(index);
}

// One tunnel. Echo mode: only its id (DATA goes back as it came). Real mode: its socket.
struct SimAgent::Tunnel {
  explicit Tunnel(asio::io_context& io) : socket(io) {}
  asio::ip::tcp::socket socket;
  bool real = false;
  std::deque<std::string> out;  // real: bytes waiting for the socket
  bool writing = false;
};

SimAgent::SimAgent(asio::io_context& io, const AgentConfig& cfg, std::string id,
                   std::string identifiers, std::string source_address, Counters& counters,
                   uint64_t seed)
    : io_(io),
      cfg_(cfg),
      id_(std::move(id)),
      identifiers_(std::move(identifiers)),
      source_(std::move(source_address)),
      counters_(counters),
      backoff_(cfg.backoff_initial, cfg.backoff_cap, seed),
      timer_(io) {}

SimAgent::~SimAgent() = default;

void SimAgent::start() { attempt(); }

void SimAgent::stop() {
  stopped_ = true;
  ++generation_;
  timer_.cancel();
  if (connecting_) {
    std::error_code ignored;
    connecting_->close(ignored);
  }
  for (auto& [cid, t] : tunnels_) {
    std::error_code ignored;
    t->socket.close(ignored);
  }
  counters_.tunnels_open -= tunnels_.size();
  tunnels_.clear();
  if (accepted_) {
    accepted_ = false;
    --counters_.connected;
  }
  if (conn_) {
    conn_->set_on_close(nullptr);
    conn_->close("stopped");
  }
  conn_.reset();
  stream_.reset();
}

void SimAgent::drain() {
  if (!stream_ || !accepted_) return;
  send(make_drain());
  ++counters_.drains;
}

void SimAgent::attempt() {
  if (stopped_) return;
  const uint64_t gen = ++generation_;
  connecting_ = std::make_unique<asio::ip::tcp::socket>(io_);
  std::error_code ec;
  asio::ip::tcp::endpoint server(asio::ip::make_address(cfg_.server_host, ec), cfg_.server_port);
  if (!ec) connecting_->open(server.protocol(), ec);
  if (!ec && !source_.empty()) {
    // The kernel picks the port at connect(), per destination: each source address has its own
    // ephemeral range.
    int one = 1;
    ::setsockopt(connecting_->native_handle(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
                 sizeof one);
    connecting_->bind(asio::ip::tcp::endpoint(asio::ip::make_address(source_, ec), 0), ec);
  }
  if (ec) {
    ++counters_.connect_failures;
    retry_after(backoff_.next());
    return;
  }
  // Bounds the whole attempt: TCP, TLS and the response headers.
  timer_.expires_after(cfg_.connect_timeout);
  timer_.async_wait([self = weak_from_this(), gen](std::error_code e) {
    auto me = self.lock();
    if (e || !me || me->generation_ != gen || me->accepted_) return;
    if (me->connecting_) {
      std::error_code ignored;
      me->connecting_->close(ignored);
    }
    if (me->conn_) me->conn_->close("connect timeout");
  });
  connecting_->async_connect(server, [self = weak_from_this(), gen](std::error_code e) {
    auto me = self.lock();
    if (!me || me->generation_ != gen) return;
    auto sock = std::move(me->connecting_);
    if (e) {
      me->on_stream_end(h2::GrpcStatus{h2::grpc_code::kUnavailable, "connect: " + e.message()});
      return;
    }
    me->on_tcp_connected(std::move(*sock));
  });
}

void SimAgent::on_tcp_connected(asio::ip::tcp::socket socket) {
  std::error_code ignored;
  socket.set_option(asio::ip::tcp::no_delay(true), ignored);
  std::unique_ptr<h2::Transport> transport;
  if (cfg_.tls) {
    transport = std::make_unique<h2::TcpTlsTransport>(std::move(socket), *cfg_.tls);
  } else {
    transport = std::make_unique<h2::TcpTransport>(std::move(socket));
  }
  h2::ConnectionOptions options;
  options.authority = cfg_.authority.empty()
                          ? cfg_.server_host + ":" + std::to_string(cfg_.server_port)
                          : cfg_.authority;
  options.scheme = cfg_.tls ? "https" : "http";
  options.user_agent = "konn-fleet-sim";
  options.keepalive_interval = cfg_.keepalive;
  options.log_name = "[fleet " + id_ + "]";
  // An idle agent stream needs no large window: packets are small and echoed at once.
  options.connection_window = 1024 * 1024;
  conn_ = h2::Connection::create(h2::Connection::Role::Client, std::move(transport), options);
  const uint64_t gen = generation_;
  std::weak_ptr<SimAgent> weak = weak_from_this();
  conn_->start();
  h2::Metadata md{{"agentid", id_}, {"agentidentifiers", identifiers_}};
  if (!cfg_.token.empty()) md.emplace_back("authorization", "Bearer " + cfg_.token);
  h2::StreamCallbacks cb;
  cb.on_headers = [weak, gen](const h2::Metadata&) {
    auto me = weak.lock();
    if (!me || me->generation_ != gen || me->accepted_) return;
    me->accepted_ = true;
    me->timer_.cancel();
    me->backoff_.reset();
    if (me->cfg_.tls) ++me->counters_.handshakes;
    ++me->counters_.connected;
    ++me->counters_.connects;
    if (std::exchange(me->ever_accepted_, true)) ++me->counters_.reconnects;
  };
  cb.on_message = [weak, gen](std::string&& m) {
    auto me = weak.lock();
    if (!me || me->generation_ != gen) return;
    me->on_packet(m);
  };
  cb.on_end = [weak, gen](const h2::GrpcStatus& st, const h2::Metadata&) {
    auto me = weak.lock();
    if (!me || me->generation_ != gen) return;
    me->on_stream_end(st);
  };
  stream_ = conn_->start_call("/AgentService/Connect", md, std::move(cb));
  if (!stream_) on_stream_end(h2::GrpcStatus{h2::grpc_code::kUnavailable, "no stream"});
}

void SimAgent::on_stream_end(const h2::GrpcStatus& /*status*/) {
  if (stopped_) return;
  ++generation_;  // handlers of this attempt go quiet
  const bool was_accepted = std::exchange(accepted_, false);
  if (was_accepted) {
    --counters_.connected;
  } else {
    ++counters_.connect_failures;
  }
  for (auto& [cid, t] : tunnels_) {
    std::error_code ignored;
    t->socket.close(ignored);
  }
  counters_.tunnels_open -= tunnels_.size();
  tunnels_.clear();
  next_connect_id_ = 1;
  if (conn_) {
    conn_->set_on_close(nullptr);
    conn_->close("stream ended");
  }
  // The connection is released from a fresh handler: this one may run inside its callbacks.
  asio::post(io_, [c = std::move(conn_), s = std::move(stream_)] {});
  // A lost stream is noticed at the next sync tick; a failed attempt steps the backoff.
  retry_after(was_accepted ? backoff_.first() : backoff_.next());
}

void SimAgent::retry_after(milliseconds d) {
  if (stopped_) return;
  const uint64_t gen = generation_;
  timer_.expires_after(d);
  timer_.async_wait([self = weak_from_this(), gen](std::error_code e) {
    auto me = self.lock();
    if (e || !me || me->generation_ != gen) return;
    me->attempt();
  });
}

void SimAgent::send(const Packet& p) {
  if (stream_) stream_->send_message(p.SerializeAsString());
}

void SimAgent::on_packet(const std::string& bytes) {
  Packet p;
  if (!p.ParseFromString(bytes)) return;
  switch (p.type()) {
    case DIAL_REQ: {
      const int64_t random = p.dialrequest().random();
      if (cfg_.dial_real) {
        dial_real(random, p.dialrequest().address());
        return;
      }
      const int64_t cid = next_connect_id_++;
      tunnels_.emplace(cid, std::make_shared<Tunnel>(io_));
      ++counters_.tunnels_open;
      ++counters_.dials;
      send(make_dial_response(random, cid));
      return;
    }
    case DATA: {
      ++counters_.data_packets;
      const int64_t cid = p.data().connectid();
      auto it = tunnels_.find(cid);
      if (it == tunnels_.end()) {
        send(make_close_response(cid, "unrecognized connectID"));
        return;
      }
      if (!it->second->real) {
        send(p);  // echo
        return;
      }
      auto t = it->second;
      t->out.push_back(std::move(*p.mutable_data()->mutable_data()));
      if (!t->writing) {
        t->writing = true;
        // Writes the queue in order; the tunnel's end drops it.
        // The pump holds itself weakly (a strong self-capture never frees the pump or its
        // tunnel); a write in flight holds it strongly until its handler has run.
        auto write_next = std::make_shared<std::function<void()>>();
        *write_next = [t, weak = std::weak_ptr<std::function<void()>>(write_next)] {
          if (t->out.empty() || !t->socket.is_open()) {
            t->writing = false;
            return;
          }
          asio::async_write(t->socket, asio::buffer(t->out.front()),
                            [t, next = weak.lock()](std::error_code e, size_t) {
                              if (e) {
                                t->writing = false;
                                t->out.clear();
                                return;
                              }
                              t->out.pop_front();
                              (*next)();
                            });
        };
        (*write_next)();
      }
      return;
    }
    case CLOSE_REQ: {
      const int64_t cid = p.closerequest().connectid();
      Packet r;
      r.set_type(CLOSE_RSP);
      r.mutable_closeresponse()->set_connectid(cid);
      auto it = tunnels_.find(cid);
      if (it == tunnels_.end()) {
        r.mutable_closeresponse()->set_error("Unknown connectID");
      } else {
        std::error_code ignored;
        it->second->socket.close(ignored);
        tunnels_.erase(it);
        --counters_.tunnels_open;
      }
      ++counters_.closes;
      send(r);
      return;
    }
    default:
      return;  // DIAL_CLS and the rest: ignored, as upstream's agent does
  }
}

void SimAgent::dial_real(int64_t random, const std::string& address) {
  auto t = std::make_shared<Tunnel>(io_);
  t->real = true;
  const size_t colon = address.rfind(':');
  std::error_code ec;
  asio::ip::tcp::endpoint ep;
  if (colon != std::string::npos) {
    std::string host = address.substr(0, colon);
    if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
    if (host == "localhost") host = "127.0.0.1";
    ep = asio::ip::tcp::endpoint(asio::ip::make_address(host, ec),
                                 static_cast<uint16_t>(std::atoi(address.c_str() + colon + 1)));
  } else {
    ec = asio::error::invalid_argument;
  }
  auto answer_error = [this, random](const std::string& why) {
    ++counters_.dial_failures;
    send(make_dial_response(random, 0, "dial tcp: " + why));
  };
  if (ec) {
    answer_error("address " + address + ": " + ec.message());
    return;
  }
  auto timer = std::make_shared<asio::steady_timer>(io_, cfg_.dial_timeout);
  // Weakly: the connect's handler holds the timer, so a strong hold here would be a cycle
  // (tunnel -> its connect -> timer -> this wait -> tunnel) left behind by a stopped io_context.
  timer->async_wait([weak = std::weak_ptr<Tunnel>(t)](std::error_code e) {
    auto tunnel = weak.lock();
    if (e || !tunnel) return;
    std::error_code ignored;
    tunnel->socket.close(ignored);
  });
  const uint64_t gen = generation_;
  t->socket.async_connect(
      ep, [self = weak_from_this(), t, timer, random, gen, answer_error](std::error_code e) {
        timer->cancel();
        auto me = self.lock();
        if (!me || me->generation_ != gen) return;
        if (e) {
          answer_error(e == asio::error::operation_aborted ? "i/o timeout" : e.message());
          return;
        }
        const int64_t cid = me->next_connect_id_++;
        me->tunnels_.emplace(cid, t);
        ++me->counters_.tunnels_open;
        ++me->counters_.dials;
        me->send(make_dial_response(random, cid));
        me->tunnel_read(cid);
      });
}

void SimAgent::tunnel_read(int64_t id) {
  auto it = tunnels_.find(id);
  if (it == tunnels_.end()) return;
  auto t = it->second;
  auto buf = std::make_shared<std::string>(4096, '\0');  // upstream's agent reads 4 KiB
  t->socket.async_read_some(asio::buffer(*buf),
                            [self = weak_from_this(), t, buf, id](std::error_code e, size_t n) {
                              auto me = self.lock();
                              if (!me) return;
                              auto it2 = me->tunnels_.find(id);
                              if (it2 == me->tunnels_.end() || it2->second != t) return;
                              if (e) {
                                me->tunnel_closed(id, true);
                                return;
                              }
                              buf->resize(n);
                              me->send(make_data(id, std::move(*buf)));
                              me->tunnel_read(id);
                            });
}

void SimAgent::tunnel_closed(int64_t id, bool notify) {
  auto it = tunnels_.find(id);
  if (it == tunnels_.end()) return;
  std::error_code ignored;
  it->second->socket.close(ignored);
  tunnels_.erase(it);
  --counters_.tunnels_open;
  if (notify) send(make_close_response(id));
}

}  // namespace konn::bench::fleet
