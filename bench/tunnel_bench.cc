// konn-tunnel-bench: measures the Konnectivity tunnel beside the direct loopback path, in one run.
// Destinations (source, sink, echo) run inside this process, so completion is observed exactly.
// Driven by bench/run.sh, which starts proxy-server and proxy-agent; see docs/performance.md.
//
// Usage: konn-tunnel-bench --proxy-uds=PATH [--bytes=N] [--round-trips=N] [--dials=N] [--json=F]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>

#include "core/config/flag_parser.h"
#include "core/net/listener.h"
#include "test-client/channel.h"
#include "test-client/tunnel.h"

namespace {

using Clock = std::chrono::steady_clock;
using asio::ip::tcp;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One blocking acceptor thread per destination; one thread per accepted connection (a bench, not
// a product: the destinations must not be the bottleneck, and their threads sit idle otherwise).
class Destination {
 public:
  using Serve = std::function<void(tcp::socket&)>;
  explicit Destination(Serve serve)
      : acceptor_(konn::core::net::listen_tcp(ctx_, "127.0.0.1", 0)), serve_(std::move(serve)) {
    thread_ = std::thread([this] {
      for (;;) {
        std::error_code ec;
        tcp::socket s(ctx_);
        acceptor_.accept(s, ec);
        if (ec || stop_) return;
        s.set_option(tcp::no_delay(true));
        std::thread([this, s = std::move(s)]() mutable { serve_(s); }).detach();
      }
    });
  }
  ~Destination() {
    stop_ = true;
    std::error_code ec;
    tcp::socket poke(ctx_);
    poke.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
  }
  std::string address() const {
    return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }

 private:
  asio::io_context ctx_;
  tcp::acceptor acceptor_;
  Serve serve_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct Row {
  std::string workload;
  double direct;
  double tunnel;
  std::string unit;
};

tcp::socket connect_direct(asio::io_context& ctx, const std::string& address) {
  auto colon = address.rfind(':');
  tcp::socket s(ctx);
  s.connect({asio::ip::make_address(address.substr(0, colon)),
             static_cast<uint16_t>(std::stoi(address.substr(colon + 1)))});
  s.set_option(tcp::no_delay(true));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string uds;
  int64_t bytes = int64_t{1} << 30;
  int round_trips = 5000;
  int dials = 2000;
  std::string json;
  konn::core::config::FlagParser flags("konn-tunnel-bench", "Tunnel vs direct loopback");
  flags.add("proxy-uds", &uds, "proxy-server frontend unix socket");
  flags.add("bytes", &bytes, "bytes per bulk transfer");
  flags.add("round-trips", &round_trips, "echo round trips on one tunnel");
  flags.add("dials", &dials, "tunnels opened and closed one after another");
  flags.add("json", &json, "also write the results to this JSON file");
  auto parsed = flags.parse(argc, argv);
  if (parsed.exit_now || !parsed.errors.empty() || uds.empty()) {
    for (auto& e : parsed.errors) std::fprintf(stderr, "%s\n", e.c_str());
    std::fputs(parsed.output.c_str(), stderr);
    return parsed.exit_now ? 0 : 2;
  }

  std::atomic<int64_t> sunk{0};
  const size_t chunk = 256 * 1024;
  Destination source([&](tcp::socket& s) {
    std::string buf(chunk, 'x');
    int64_t left = bytes;
    std::error_code ec;
    while (left > 0 && !ec) {
      left -= static_cast<int64_t>(
          asio::write(s, asio::buffer(buf.data(), std::min<int64_t>(left, chunk)), ec));
    }
    s.shutdown(tcp::socket::shutdown_send, ec);
    char c;
    s.read_some(asio::buffer(&c, 1), ec);
  });
  Destination sink([&](tcp::socket& s) {
    std::string buf(chunk, '\0');
    std::error_code ec;
    for (;;) {
      size_t n = s.read_some(asio::buffer(buf), ec);
      sunk += static_cast<int64_t>(n);
      if (ec) return;
    }
  });
  Destination echo([&](tcp::socket& s) {
    std::string buf(64 * 1024, '\0');
    std::error_code ec;
    for (;;) {
      size_t n = s.read_some(asio::buffer(buf), ec);
      if (ec) return;
      asio::write(s, asio::buffer(buf.data(), n), ec);
      if (ec) return;
    }
  });
  Destination closer([&](tcp::socket&) {});

  konn::testclient::ChannelConfig cfg;
  cfg.uds_path = uds;
  auto channel = konn::testclient::make_channel(cfg);
  if (!konn::testclient::wait_connected(channel, std::chrono::seconds(10))) {
    std::fprintf(stderr, "cannot reach the proxy-server at %s\n", uds.c_str());
    return 1;
  }
  auto dial = [&](const std::string& address) {
    auto r = konn::testclient::Tunnel::dial(channel, address, std::chrono::seconds(10));
    if (!r.tunnel) {
      std::fprintf(stderr, "dial %s failed: %s\n", address.c_str(), r.error.c_str());
      std::exit(1);
    }
    return std::move(r.tunnel);
  };
  asio::io_context ctx;
  std::vector<Row> rows;
  const double mb = 1e6;

  // Bulk, agent -> client ("download").
  {
    auto s = connect_direct(ctx, source.address());
    std::string buf(chunk, '\0');
    int64_t got = 0;
    auto t0 = Clock::now();
    std::error_code ec;
    while (got < bytes) got += static_cast<int64_t>(s.read_some(asio::buffer(buf), ec));
    double direct = static_cast<double>(got) / seconds_since(t0) / mb;
    auto t = dial(source.address());
    got = 0;
    t0 = Clock::now();
    while (got < bytes) {
      auto d = t->read();
      if (!d) break;
      got += static_cast<int64_t>(d->size());
    }
    double tunnel = static_cast<double>(got) / seconds_since(t0) / mb;
    if (got < bytes) std::fprintf(stderr, "download ended early: %ld bytes\n", static_cast<long>(got));
    t->close();
    rows.push_back({"bulk download (agent->client)", direct, tunnel, "MB/s"});
  }
  // Bulk, client -> agent ("upload").
  {
    std::string buf(chunk, 'u');
    auto s = connect_direct(ctx, sink.address());
    sunk = 0;
    auto t0 = Clock::now();
    for (int64_t sent = 0; sent < bytes; sent += chunk) asio::write(s, asio::buffer(buf));
    while (sunk < bytes) std::this_thread::yield();
    double direct = static_cast<double>(bytes) / seconds_since(t0) / mb;
    s.close();
    auto t = dial(sink.address());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    sunk = 0;
    t0 = Clock::now();
    for (int64_t sent = 0; sent < bytes; sent += chunk) {
      if (!t->write(buf)) break;
    }
    auto deadline = Clock::now() + std::chrono::seconds(120);
    while (sunk < bytes && Clock::now() < deadline) std::this_thread::yield();
    double tunnel = static_cast<double>(sunk.load()) / seconds_since(t0) / mb;
    t->close();
    rows.push_back({"bulk upload (client->agent)", direct, tunnel, "MB/s"});
  }
  // Round trips of 64 bytes on one kept-open connection.
  auto percentile = [](std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
  };
  {
    std::string msg(64, 'r');
    std::string back(64, '\0');
    std::vector<double> direct_us;
    auto s = connect_direct(ctx, echo.address());
    for (int i = 0; i < round_trips; ++i) {
      auto t0 = Clock::now();
      asio::write(s, asio::buffer(msg));
      asio::read(s, asio::buffer(back));
      direct_us.push_back(seconds_since(t0) * 1e6);
    }
    std::vector<double> tunnel_us;
    auto t = dial(echo.address());
    for (int i = 0; i < round_trips; ++i) {
      auto t0 = Clock::now();
      t->write(msg);
      size_t got = 0;
      while (got < msg.size()) {
        auto d = t->read();
        if (!d) break;
        got += d->size();
      }
      tunnel_us.push_back(seconds_since(t0) * 1e6);
    }
    t->close();
    rows.push_back({"round trip p50", percentile(direct_us, 0.5), percentile(tunnel_us, 0.5), "us"});
    rows.push_back({"round trip p99", percentile(direct_us, 0.99), percentile(tunnel_us, 0.99), "us"});
  }
  // New connections per second, one after another (dial, then close).
  {
    auto t0 = Clock::now();
    for (int i = 0; i < dials; ++i) {
      auto s = connect_direct(ctx, closer.address());
      s.close();
    }
    double direct = dials / seconds_since(t0);
    t0 = Clock::now();
    for (int i = 0; i < dials; ++i) dial(closer.address())->close();
    double tunnel = dials / seconds_since(t0);
    rows.push_back({"new connections, sequential", direct, tunnel, "per s"});
  }

  std::printf("%-32s %14s %14s %10s\n", "workload", "direct", "tunnel", "tunnel/direct");
  for (const auto& r : rows) {
    std::printf("%-32s %10.1f %-5s %8.1f %-5s %8.2f\n", r.workload.c_str(), r.direct,
                r.unit.c_str(), r.tunnel, r.unit.c_str(), r.tunnel / r.direct);
  }
  if (!json.empty()) {
    std::ofstream out(json);
    out << "[\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      out << "  {\"workload\": \"" << r.workload << "\", \"unit\": \"" << r.unit
          << "\", \"direct\": " << r.direct << ", \"tunnel\": " << r.tunnel << "}"
          << (i + 1 < rows.size() ? "," : "") << "\n";
    }
    out << "]\n";
  }
  return 0;
}
