#include "bench/fleet/frontend_load.h"

#include <algorithm>
#include <random>
#include <utility>

#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include "core/h2/connection.h"
#include "core/h2/transport.h"
#include "core/tunnel/packet.h"
#include "konnectivity/client.pb.h"

namespace konn::bench::fleet {

namespace h2 = core::h2;
using Clock = std::chrono::steady_clock;

double Latencies::percentile(double p) const {
  if (us.empty()) return 0;
  std::vector<double> v = us;
  const size_t k =
      std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

namespace {

enum class TState { Idle, Dialing, Open, Closing, Done, Failed };

struct FrontTunnel {
  std::shared_ptr<h2::Stream> stream;
  TState state = TState::Idle;
  int64_t connect_id = 0;
  int64_t random = 0;
  Clock::time_point started;
  size_t echo_wanted = 0;  // bytes of the round trip still to come back
  std::function<void()> on_echo;
  bool over = false;  // Done or Failed, counted in its connection's conn_over
};

}  // namespace

struct FrontendLoad::Impl {
  asio::io_context& io;
  FrontendConfig cfg;
  std::vector<std::shared_ptr<h2::Connection>> conns;
  std::vector<uint64_t> conn_over;  // per connection: its tunnels that are over
  std::vector<FrontTunnel> tunnels;
  std::mt19937_64 rng{42};
  FrontendResult* result = nullptr;
  uint64_t next = 0;       // next tunnel to dial
  uint64_t in_flight = 0;  // dials (and churn closes) not answered
  uint64_t settled = 0;    // tunnels whose dial is over
  uint64_t closing = 0;
  uint64_t first_dialing = 0;  // tunnels before it are past their dial

  Impl(asio::io_context& i, FrontendConfig c) : io(i), cfg(std::move(c)) {}

  std::shared_ptr<h2::Connection> connection_for(uint64_t i) {
    const uint64_t k = std::max<uint64_t>(1, cfg.streams_per_conn);
    const uint64_t c = i / k;
    if (c < conns.size() && conns[c] && !conns[c]->closed()) return conns[c];
    asio::local::stream_protocol::socket s(io);
    std::error_code ec;
    s.connect(asio::local::stream_protocol::endpoint(cfg.uds), ec);
    if (ec) {
      if (result && result->first_error.empty())
        result->first_error = "connect " + cfg.uds + ": " + ec.message();
      return nullptr;
    }
    h2::ConnectionOptions o;
    o.authority = cfg.uds;
    o.user_agent = "konn-fleet-frontend";
    o.log_name = "[fleet frontend]";
    auto conn = h2::Connection::create(h2::Connection::Role::Client,
                                       std::make_unique<h2::UnixTransport>(std::move(s)), o);
    conn->start();
    if (conns.size() <= c) {
      conns.resize(c + 1);
      conn_over.resize(c + 1);
    }
    conns[c] = conn;
    if (result) ++result->connections;
    return conn;
  }

  void send(FrontTunnel& t, const Packet& p) {
    if (t.stream) t.stream->send_message(p.SerializeAsString());
  }

  // Tunnel i is over (closed, or failed). With churn, a connection whose tunnels are all over
  // is closed, as kube-apiserver closes a request's connection: a run of many dials does not
  // hold a descriptor in the server for each.
  void over(uint64_t i) {
    FrontTunnel& t = tunnels[i];
    if (std::exchange(t.over, true) || !cfg.churn) return;
    const uint64_t k = std::max<uint64_t>(1, cfg.streams_per_conn);
    const uint64_t c = i / k;
    if (c >= conns.size()) return;  // its connection never opened
    const uint64_t expected = std::min<uint64_t>(k, tunnels.size() - c * k);
    if (++conn_over[c] == expected && conns[c]) {
      // Posted: this runs inside one of the connection's own callbacks.
      asio::post(io, [conn = std::move(conns[c])] { conn->close("done"); });
    }
  }

  void fail(uint64_t i, const std::string& why) {
    FrontTunnel& t = tunnels[i];
    if (t.state == TState::Dialing) {
      ++result->failed;
      result->dial_failed.us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - t.started).count());
      if (result->first_error.empty()) result->first_error = why;
      --in_flight;
      ++settled;
    }
    t.state = TState::Failed;
    if (t.stream) {
      auto s = std::move(t.stream);
      s->cancel();
    }
    over(i);
  }

  void dial(uint64_t i) {
    FrontTunnel& t = tunnels[i];
    auto conn = connection_for(i);
    ++in_flight;
    t.state = TState::Dialing;
    t.started = Clock::now();
    if (!conn) {
      fail(i, result->first_error);
      return;
    }
    h2::StreamCallbacks cb;
    cb.on_message = [this, i](std::string&& m) { on_packet(i, m); };
    cb.on_end = [this, i](const h2::GrpcStatus& st, const h2::Metadata&) {
      FrontTunnel& tt = tunnels[i];
      tt.stream.reset();
      if (tt.state == TState::Dialing) {
        fail(i, "stream ended before DIAL_RSP: " + std::to_string(st.code) + " " + st.message);
      } else if (tt.state == TState::Closing) {
        tt.state = TState::Done;
        if (closing) --closing;
        over(i);
      } else if (tt.state == TState::Open) {
        tt.state = TState::Failed;
        if (tt.on_echo) {
          ++result->rtt_failed;
          auto f = std::move(tt.on_echo);
          f();
        }
        over(i);
      }
    };
    t.stream = conn->start_call("/ProxyService/Proxy", {}, std::move(cb));
    if (!t.stream) {
      fail(i, "the connection refused a new stream");
      return;
    }
    t.random = static_cast<int64_t>(rng() >> 1);
    send(t, core::tunnel::make_dial_request(cfg.address(i), t.random));
  }

  void start_close(uint64_t i) {
    FrontTunnel& t = tunnels[i];
    t.state = TState::Closing;
    ++closing;
    send(t, core::tunnel::make_close_request(t.connect_id));
  }

  void on_packet(uint64_t i, const std::string& bytes) {
    FrontTunnel& t = tunnels[i];
    Packet p;
    if (!p.ParseFromString(bytes)) return;
    if (p.type() == DIAL_RSP && t.state == TState::Dialing) {
      --in_flight;
      ++settled;
      if (!p.dialresponse().error().empty()) {
        ++result->failed;
        result->dial_failed.us.push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - t.started).count());
        if (result->first_error.empty()) result->first_error = p.dialresponse().error();
        t.state = TState::Failed;
        auto s = std::move(t.stream);
        if (s) s->cancel();
        over(i);
        return;
      }
      result->dial.us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - t.started).count());
      ++result->opened;
      t.connect_id = p.dialresponse().connectid();
      t.state = TState::Open;
      if (cfg.churn) start_close(i);
      return;
    }
    if (p.type() == DATA && t.echo_wanted > 0) {
      const size_t n = p.data().data().size();
      t.echo_wanted -= std::min(n, t.echo_wanted);
      if (t.echo_wanted == 0 && t.on_echo) {
        auto f = std::move(t.on_echo);
        f();
      }
      return;
    }
    if ((p.type() == CLOSE_RSP || p.type() == DIAL_CLS) && t.stream) {
      if (t.state == TState::Open && t.on_echo) {
        ++result->rtt_failed;
        auto f = std::move(t.on_echo);
        f();
      }
      if (t.state == TState::Open) t.state = TState::Closing, ++closing;
      t.stream->half_close();
    }
  }

  // Runs the io_context until `done` or `limit` passed.
  template <typename Pred>
  void run_until(Pred done, std::chrono::milliseconds limit) {
    const auto end = Clock::now() + limit;
    asio::steady_timer tick(io);
    if (io.stopped()) io.restart();
    while (!done() && Clock::now() < end) {
      tick.expires_after(std::chrono::milliseconds(50));
      tick.async_wait([](std::error_code) {});
      io.run_one();
    }
    tick.cancel();
    io.poll();
  }
};

FrontendLoad::FrontendLoad(asio::io_context& io, FrontendConfig cfg)
    : impl_(std::make_unique<Impl>(io, std::move(cfg))) {}

FrontendLoad::~FrontendLoad() {
  for (auto& c : impl_->conns) {
    if (c) c->close("done");
  }
  impl_->io.poll();
}

FrontendResult FrontendLoad::open() {
  Impl& m = *impl_;
  FrontendResult r;
  m.result = &r;
  m.tunnels.resize(m.cfg.tunnels);
  const auto t0 = Clock::now();
  auto last_start = Clock::time_point{};
  auto pump = [&m, &last_start] {
    while (m.next < m.cfg.tunnels && m.in_flight < std::max<uint64_t>(1, m.cfg.concurrency)) {
      if (m.cfg.interval.count() > 0) {
        const auto now = Clock::now();
        if (now - last_start < m.cfg.interval) return;
        last_start = now;
      }
      m.dial(m.next++);
    }
  };
  const auto tick = m.cfg.interval.count() > 0
                        ? std::min(m.cfg.interval, m.cfg.dial_timeout)
                        : std::min(m.cfg.dial_timeout, std::chrono::milliseconds(1000));
  while (m.settled < m.cfg.tunnels || (m.cfg.churn && m.closing > 0)) {
    pump();
    const uint64_t before = m.settled;
    m.run_until([&] { return m.settled != before || m.settled == m.cfg.tunnels; }, tick);
    // A dial unanswered past the backstop times out.
    const auto now = Clock::now();
    for (uint64_t i = m.first_dialing; i < m.next; ++i) {
      FrontTunnel& t = m.tunnels[i];
      if (t.state != TState::Dialing) {
        if (i == m.first_dialing) ++m.first_dialing;
        continue;
      }
      if (now - t.started < m.cfg.dial_timeout) break;  // dials start in order
      ++r.timed_out;
      m.fail(i, "dial timeout");
      --r.failed;  // fail() counted it as failed too
      r.dial_failed.us.pop_back();
    }
    if (m.cfg.churn && m.settled == m.cfg.tunnels) {
      m.run_until([&] { return m.closing == 0; }, std::chrono::milliseconds(10000));
      break;
    }
  }
  r.open_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  m.result = nullptr;
  return r;
}

void FrontendLoad::round_trips(FrontendResult& r) {
  Impl& m = *impl_;
  m.result = &r;
  uint64_t running = 0;
  const std::string payload(m.cfg.payload, 'x');
  std::function<void(uint64_t, uint64_t)> one;
  one = [&](uint64_t i, uint64_t left) {
    FrontTunnel& t = m.tunnels[i];
    if (left == 0 || t.state != TState::Open) {
      --running;
      return;
    }
    t.echo_wanted = payload.size();
    const auto start = Clock::now();
    t.on_echo = [&, i, left, start] {
      if (m.tunnels[i].state == TState::Open) {
        r.round_trip.us.push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
      one(i, left - 1);
    };
    m.send(t, core::tunnel::make_data(t.connect_id, std::string(payload)));
  };
  for (uint64_t i = 0, n = 0; i < m.tunnels.size() && n < m.cfg.active; ++i) {
    if (m.tunnels[i].state != TState::Open) continue;
    ++n;
    ++running;
    one(i, m.cfg.round_trips);
  }
  m.run_until([&] { return running == 0; }, std::chrono::milliseconds(60000));
  for (auto& t : m.tunnels) t.on_echo = nullptr;
  m.result = nullptr;
}

uint64_t FrontendLoad::close_all() {
  Impl& m = *impl_;
  FrontendResult scratch;
  m.result = &scratch;
  for (uint64_t i = 0; i < m.tunnels.size(); ++i) {
    if (m.tunnels[i].state == TState::Open) m.start_close(i);
  }
  m.run_until([&] { return m.closing == 0; }, std::chrono::milliseconds(10000));
  uint64_t clean = 0;
  for (auto& t : m.tunnels) {
    if (t.state == TState::Done) ++clean;
    if (t.stream) {
      auto s = std::move(t.stream);
      s->cancel();
    }
  }
  for (auto& c : m.conns) {
    if (c) c->shutdown();
  }
  m.run_until(
      [&] {
        return std::all_of(m.conns.begin(), m.conns.end(),
                           [](const auto& c) { return !c || c->closed(); });
      },
      std::chrono::milliseconds(5000));
  for (auto& c : m.conns) {
    if (c && !c->closed()) c->close("done");
  }
  m.conns.clear();
  m.io.poll();
  m.result = nullptr;
  return clean;
}

}  // namespace konn::bench::fleet
