#include "bench/loadgen/workloads.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "bench/loadgen/destination.h"
#include "bench/loadgen/pattern.h"
#include "core/http/http1_parser.h"

namespace konn::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kChunk = 256 * 1024;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// io_contexts, one thread each, that run a batch of coroutines to completion.
class Workers {
 public:
  explicit Workers(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) {
      contexts_.push_back(std::make_unique<asio::io_context>(1));
    }
  }
  size_t size() const { return contexts_.size(); }
  asio::io_context& ctx(size_t i) { return *contexts_[i % contexts_.size()]; }

  // Runs make(i) on ctx(place(i)) (default ctx(i)) for every i < count and returns when all
  // ended; throws the first failure's message. `make` must outlive the call (it does: run()
  // blocks). A stream must be used on the context that opened it: keep `place` across calls.
  void run(int count, const std::function<Awaitable<void>(int)>& make,
           const std::function<size_t(int)>& place = nullptr) {
    if (count <= 0) return;
    std::atomic<int> left{count};
    std::mutex mu;
    std::string error;
    for (auto& c : contexts_) c->restart();
    for (int i = 0; i < count; ++i) {
      asio::co_spawn(ctx(place ? place(i) : static_cast<size_t>(i)), make(i),
                     [&](const std::exception_ptr& e) {
                       if (e) {
                         std::lock_guard lock(mu);
                         if (error.empty()) {
                           try {
                             std::rethrow_exception(e);
                           } catch (const std::exception& ex) {
                             error = ex.what();
                           }
                         }
                       }
                       if (left.fetch_sub(1) == 1) {
                         for (auto& c : contexts_) c->stop();
                       }
                     });
    }
    std::vector<std::thread> pool;
    for (size_t i = 1; i < contexts_.size(); ++i) {
      pool.emplace_back([this, i] {
        auto guard = asio::make_work_guard(*contexts_[i]);
        contexts_[i]->run();
      });
    }
    {
      auto guard = asio::make_work_guard(*contexts_[0]);
      contexts_[0]->run();
    }
    for (auto& t : pool) t.join();
    if (!error.empty()) throw std::runtime_error(error);
  }

 private:
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
};

Awaitable<std::unique_ptr<Stream>> must_open(Opener& opener, const std::string& target) {
  auto [s, err] = co_await opener.open(target);
  if (!s)
    throw std::runtime_error("open " + target + " via " + opener.via().to_string() + ": " + err);
  co_return std::move(s);
}

Awaitable<void> must_write(Stream& s, asio::const_buffer b, const char* what) {
  if (auto ec = co_await s.write(b)) {
    throw std::runtime_error(std::string(what) + ": write failed: " + ec.message());
  }
}

Awaitable<void> must_read(Stream& s, char* p, size_t n, const char* what) {
  while (n > 0) {
    auto [ec, got] = co_await s.read_some(asio::buffer(p, n));
    if (ec) throw std::runtime_error(std::string(what) + ": read failed: " + ec.message());
    p += got;
    n -= got;
  }
}

Awaitable<void> must_close(Stream& s, const char* what) {
  if (auto ec = co_await s.close()) {
    throw std::runtime_error(std::string(what) + ": close failed: " + ec.message());
  }
}

// The request that starts a destination connection (see destination.h).
Awaitable<void> send_header(Stream& s, char kind, uint64_t n) {
  std::array<char, 9> h{};
  h[0] = kind;
  std::memcpy(h.data() + 1, &n, 8);
  const size_t len = kind == wire::kDownload || kind == wire::kUpload ? 9 : 1;
  co_await must_write(s, asio::buffer(h.data(), len), "request");
}

// Reads and checks pattern bytes from *offset until `limit` bytes in all or `deadline`.
Awaitable<uint64_t> read_pattern(Stream& s, uint64_t* offset, uint64_t limit,
                                 Clock::time_point deadline, std::vector<char>& buf) {
  const Pattern& pat = Pattern::get();
  uint64_t got_total = 0;
  while (*offset < limit && Clock::now() < deadline) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), limit - *offset));
    auto [ec, got] = co_await s.read_some(asio::buffer(buf.data(), want));
    if (ec) {
      throw std::runtime_error("download ended after " + std::to_string(*offset) +
                               " bytes: " + ec.message());
    }
    if (!pat.check(*offset, buf.data(), got)) {
      throw std::runtime_error("download bytes wrong near offset " + std::to_string(*offset));
    }
    *offset += got;
    got_total += got;
  }
  co_return got_total;
}

// One echo round trip of `size` bytes (pattern at *offset); returns its latency in µs.
Awaitable<float> round_trip(Stream& s, uint64_t* offset, size_t size, std::vector<char>& buf) {
  const Pattern& pat = Pattern::get();
  auto t0 = Clock::now();
  co_await must_write(s, asio::buffer(pat.at(*offset), size), "round trip");
  co_await must_read(s, buf.data(), size, "round trip");
  auto t1 = Clock::now();
  if (!pat.check(*offset, buf.data(), size)) throw std::runtime_error("echo bytes wrong");
  *offset += size;
  co_return static_cast<float>(std::chrono::duration<double, std::micro>(t1 - t0).count());
}

double percentile(std::vector<float>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto rank = static_cast<size_t>(p * static_cast<double>(v.size()));
  return v[std::min(v.size() - 1, rank)];
}

std::vector<float> merge(std::vector<std::vector<float>>& per) {
  std::vector<float> all;
  for (auto& v : per) all.insert(all.end(), v.begin(), v.end());
  return all;
}

nlohmann::json base(const char* workload, const WorkloadOptions& o) {
  return {{"workload", workload}, {"via", o.via.to_string()}};
}

// An HTTP/1.1 GET on an open stream, answer read in full; throws unless 200.
Awaitable<void> http_get(Stream& s, const std::string& path) {
  using core::http::Http1Parser;
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  co_await must_write(s, asio::buffer(req), "http request");
  Http1Parser parser(Http1Parser::Kind::Response);
  std::array<char, 16384> buf{};
  for (;;) {
    auto [ec, n] = co_await s.read_some(asio::buffer(buf));
    if (ec) throw std::runtime_error("http answer: " + ec.message());
    auto r = parser.feed(std::string_view(buf.data(), n));
    if (r.status == Http1Parser::Status::Invalid) {
      throw std::runtime_error("http answer: " + parser.error());
    }
    if (r.status == Http1Parser::Status::MessageComplete) break;
  }
  if (parser.head().status != 200) {
    throw std::runtime_error("http answer: " + std::to_string(parser.head().status) + " " +
                             parser.head().reason);
  }
}

}  // namespace

nlohmann::json run_bulk(const WorkloadOptions& o) {
  if (o.direction != "down" && o.direction != "up") {
    throw std::runtime_error("--direction must be down or up");
  }
  const bool down = o.direction == "down";
  Opener opener(o.via);
  Workers w(o.threads);
  const int n = std::max(1, o.streams);
  std::vector<std::unique_ptr<Stream>> streams(static_cast<size_t>(n));
  w.run(n, [&](int i) -> Awaitable<void> {
    streams[static_cast<size_t>(i)] = co_await must_open(opener, o.target);
  });
  std::vector<Clock::time_point> ends(static_cast<size_t>(n));
  const auto start = Clock::now();
  w.run(n, [&](int i) -> Awaitable<void> {
    Stream& s = *streams[static_cast<size_t>(i)];
    uint64_t len = static_cast<uint64_t>(o.bytes / n) + (i == 0 ? o.bytes % n : 0);
    co_await send_header(s, down ? wire::kDownload : wire::kUpload, len);
    if (down) {
      std::vector<char> buf(kChunk);
      uint64_t off = 0;
      co_await read_pattern(s, &off, len, Clock::time_point::max(), buf);
    } else {
      const Pattern& pat = Pattern::get();
      for (uint64_t off = 0; off < len;) {
        size_t part = static_cast<size_t>(std::min<uint64_t>(kChunk, len - off));
        co_await must_write(s, asio::buffer(pat.at(off), part), "upload");
        off += part;
      }
      char answer = 0;
      co_await must_read(s, &answer, 1, "upload answer");
      if (answer != wire::kUploadOk) throw std::runtime_error("destination: upload bytes wrong");
    }
    ends[static_cast<size_t>(i)] = Clock::now();
  });
  const double secs = seconds_between(start, *std::max_element(ends.begin(), ends.end()));
  w.run(n, [&](int i) -> Awaitable<void> {
    co_await must_close(*streams[static_cast<size_t>(i)], "bulk");
  });
  auto j = base("bulk", o);
  j["direction"] = o.direction;
  j["streams"] = n;
  j["bytes"] = o.bytes;
  j["seconds"] = secs;
  j["mb_s"] = static_cast<double>(o.bytes) / secs / 1e6;
  return j;
}

nlohmann::json run_round_trips(const WorkloadOptions& o) {
  Opener opener(o.via);
  Workers w(o.threads);
  const int n = std::max(1, o.tunnels);
  const auto size = static_cast<size_t>(std::clamp(o.size, 1, 65536));
  std::vector<std::unique_ptr<Stream>> streams(static_cast<size_t>(n));
  w.run(n, [&](int i) -> Awaitable<void> {
    auto s = co_await must_open(opener, o.target);
    co_await send_header(*s, wire::kEcho, 0);
    streams[static_cast<size_t>(i)] = std::move(s);
  });
  std::vector<std::vector<float>> lat(static_cast<size_t>(n));
  const auto start = Clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  w.run(n, [&](int i) -> Awaitable<void> {
    auto& mine = lat[static_cast<size_t>(i)];
    mine.reserve(1 << 16);
    std::vector<char> buf(size);
    uint64_t off = 0;
    while (Clock::now() < deadline) {
      mine.push_back(co_await round_trip(*streams[static_cast<size_t>(i)], &off, size, buf));
    }
  });
  const double secs = seconds_between(start, Clock::now());
  w.run(n, [&](int i) -> Awaitable<void> {
    co_await must_close(*streams[static_cast<size_t>(i)], "round trips");
  });
  auto all = merge(lat);
  auto j = base("rr", o);
  j["tunnels"] = n;
  j["size"] = size;
  j["round_trips"] = all.size();
  j["rate"] = static_cast<double>(all.size()) / secs;
  j["p50_us"] = percentile(all, 0.50);
  j["p99_us"] = percentile(all, 0.99);
  return j;
}

nlohmann::json run_dials(const WorkloadOptions& o) {
  Opener opener(o.via);
  Workers w(o.threads);
  const int n = std::max(1, o.concurrency);
  const auto size = static_cast<size_t>(std::clamp(o.size, 1, 65536));
  std::vector<std::vector<float>> lat(static_cast<size_t>(n));
  const auto start = Clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  w.run(n, [&](int i) -> Awaitable<void> {
    auto& mine = lat[static_cast<size_t>(i)];
    std::vector<char> buf(size);
    const Pattern& pat = Pattern::get();
    std::string req(1, wire::kEcho);
    req.append(pat.at(0), size);
    while (Clock::now() < deadline) {
      auto t0 = Clock::now();
      auto s = co_await must_open(opener, o.target);
      if (o.request) {
        co_await must_write(*s, asio::buffer(req), "request");
        co_await must_read(*s, buf.data(), size, "answer");
        if (!pat.check(0, buf.data(), size)) throw std::runtime_error("echo bytes wrong");
      }
      co_await must_close(*s, "dial");
      mine.push_back(
          static_cast<float>(std::chrono::duration<double, std::micro>(Clock::now() - t0).count()));
    }
  });
  const double secs = seconds_between(start, Clock::now());
  auto all = merge(lat);
  auto j = base("dials", o);
  j["concurrency"] = n;
  j["request"] = o.request;
  j["dials"] = all.size();
  j["rate"] = static_cast<double>(all.size()) / secs;
  j["p50_us"] = percentile(all, 0.50);
  j["p99_us"] = percentile(all, 0.99);
  return j;
}

nlohmann::json run_hold(const WorkloadOptions& o) {
  Opener opener(o.via);
  Workers w(o.threads);
  const int workers = std::max(1, std::min(o.concurrency, o.count));
  // Streams by the context that opened them: each is used (closed) on that context only.
  std::vector<std::vector<std::unique_ptr<Stream>>> held(w.size());
  std::atomic<int> next{0};
  const auto start = Clock::now();
  w.run(workers, [&](int k) -> Awaitable<void> {
    auto& mine = held[static_cast<size_t>(k) % held.size()];
    while (next.fetch_add(1) < o.count) {
      auto s = co_await must_open(opener, o.target);
      if (o.http_get.empty()) {
        co_await send_header(*s, wire::kIdle, 0);
      } else {
        co_await http_get(*s, o.http_get);
      }
      mine.push_back(std::move(s));
    }
  });
  nlohmann::json ready = {
      {"event", "ready"}, {"count", o.count}, {"seconds", seconds_between(start, Clock::now())}};
  std::cout << ready.dump() << std::endl;
  std::string line;
  std::getline(std::cin, line);
  std::vector<size_t> cursor(held.size(), 0);
  w.run(workers, [&](int k) -> Awaitable<void> {
    const size_t c = static_cast<size_t>(k) % held.size();
    auto& mine = held[c];
    while (cursor[c] < mine.size()) {
      auto& s = mine[cursor[c]++];
      co_await must_close(*s, "hold");
      s.reset();
    }
  });
  return {
      {"event", "closed"}, {"workload", "hold"}, {"via", o.via.to_string()}, {"count", o.count}};
}

nlohmann::json run_head_of_line(const WorkloadOptions& o) {
  Opener opener(o.via);
  Workers w(o.threads);
  const int n = std::max(1, o.tunnels);
  const auto size = static_cast<size_t>(std::clamp(o.size, 1, 65536));
  constexpr uint64_t kEndless = uint64_t{1} << 60;
  // Streams 0..n-1 download; stream n does round trips; stream n+1 is the stalled one.
  std::vector<std::unique_ptr<Stream>> streams(static_cast<size_t>(n) + 2);
  std::vector<uint64_t> offsets(streams.size(), 0);
  // With two or more threads the round trips get a thread of their own, so the downloads'
  // reading and checking do not add to their latency.
  auto place = [n](int i) -> size_t { return i == n ? 1 : 0; };
  w.run(
      n + 1,
      [&](int i) -> Awaitable<void> {
        auto s = co_await must_open(opener, o.target);
        co_await send_header(*s, i < n ? wire::kDownload : wire::kEcho, kEndless);
        streams[static_cast<size_t>(i)] = std::move(s);
      },
      place);
  struct Figures {
    double mb_s;
    double p50_us;
    double p99_us;
  };
  auto measure = [&](double seconds) {
    std::atomic<uint64_t> bytes{0};
    std::vector<float> lat;
    lat.reserve(1 << 16);
    const auto start = Clock::now();
    const auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    w.run(
        n + 1,
        [&](int i) -> Awaitable<void> {
          auto& s = *streams[static_cast<size_t>(i)];
          auto& off = offsets[static_cast<size_t>(i)];
          if (i < n) {
            std::vector<char> buf(kChunk);
            bytes += co_await read_pattern(s, &off, kEndless, deadline, buf);
          } else {
            std::vector<char> buf(size);
            while (Clock::now() < deadline) lat.push_back(co_await round_trip(s, &off, size, buf));
          }
        },
        place);
    const double secs = seconds_between(start, Clock::now());
    return Figures{static_cast<double>(bytes.load()) / secs / 1e6, percentile(lat, 0.5),
                   percentile(lat, 0.99)};
  };
  measure(std::min(1.0, o.seconds));  // warm-up
  const Figures before = measure(o.seconds);
  w.run(
      1,
      [&](int) -> Awaitable<void> {
        auto s = co_await must_open(opener, o.target);
        co_await send_header(*s, wire::kHose, 0);
        streams.back() = std::move(s);  // never read from again until it is closed
      },
      place);
  measure(std::min(1.0, o.seconds));  // lets the stalled stream fill every queue on its way
  const Figures stalled = measure(o.seconds);
  w.run(
      static_cast<int>(streams.size()),
      [&](int i) -> Awaitable<void> {
        co_await must_close(*streams[static_cast<size_t>(i)], "head-of-line");
      },
      place);
  auto j = base("hol", o);
  j["tunnels"] = n;
  j["mb_s"] = before.mb_s;
  j["mb_s_stalled"] = stalled.mb_s;
  j["p50_us"] = before.p50_us;
  j["p50_us_stalled"] = stalled.p50_us;
  j["p99_us"] = before.p99_us;
  j["p99_us_stalled"] = stalled.p99_us;
  j["mb_s_ratio"] = stalled.mb_s / before.mb_s;
  j["p99_ratio"] = stalled.p99_us / before.p99_us;
  return j;
}

}  // namespace konn::bench
