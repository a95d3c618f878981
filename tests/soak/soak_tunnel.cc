#include "tests/soak/soak_tunnel.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <variant>
#include <vector>

#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>

#include "bench/loadgen/destination.h"
#include "bench/loadgen/seeded_bytes.h"
#include "bench/loadgen/sha256.h"

namespace konn::soak {

using bench::SeededBytes;
using bench::Sha256;
using core::io::Awaitable;
using core::io::use_nothrow;
using namespace asio::experimental::awaitable_operators;

const char* to_string(Kind k) {
  switch (k) {
    case Kind::Echo:
      return "echo";
    case Kind::Download:
      return "download";
    case Kind::SlowReader:
      return "slow_reader";
    case Kind::Reset:
      return "reset";
  }
  return "?";
}

const char* to_string(Path p) { return p == Path::Grpc ? "grpc" : "connect"; }

const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::Verified:
      return "verified";
    case Outcome::Reset:
      return "reset";
    case Outcome::Failed:
      return "failed";
    case Outcome::Corrupt:
      return "corrupt";
    case Outcome::Stuck:
      return "stuck";
  }
  return "?";
}

namespace {

// Log-uniform in [lo, hi]: mostly small transfers, some large ones.
uint64_t log_uniform(std::mt19937_64& rng, uint64_t lo, uint64_t hi) {
  std::uniform_real_distribution<double> d(std::log(static_cast<double>(lo)),
                                           std::log(static_cast<double>(hi)));
  return std::clamp<uint64_t>(static_cast<uint64_t>(std::exp(d(rng))), lo, hi);
}

}  // namespace

TunnelPlan TunnelPlan::draw(int index, std::mt19937_64& rng) {
  TunnelPlan p;
  p.index = index;
  p.seed = rng();
  p.path = (rng() & 1) != 0 ? Path::Grpc : Path::Connect;
  const uint64_t pick = rng() % 100;
  if (pick < 35) {
    p.kind = Kind::Echo;
    p.bytes = log_uniform(rng, 1, 512 * 1024);
  } else if (pick < 70) {
    p.kind = Kind::Download;
    p.bytes = log_uniform(rng, 1, 4 * 1024 * 1024);
  } else if (pick < 80) {
    p.kind = Kind::SlowReader;
    p.bytes = log_uniform(rng, 512 * 1024, 3 * 1024 * 1024);
    p.slow_read = static_cast<size_t>(4096 + rng() % (12 * 1024));
    p.slow_pause = std::chrono::microseconds(1000 + rng() % 4000);
  } else {
    p.kind = Kind::Reset;
    p.reset_echo = (rng() & 1) != 0;
    p.bytes = log_uniform(rng, 64 * 1024, 8 * 1024 * 1024);
    p.reset_after = rng() % std::min<uint64_t>(p.bytes, 1024 * 1024);
  }
  return p;
}

namespace {

struct Check {
  TunnelResult* r;
  bool fail(Outcome o, std::string why) {
    r->outcome = o;
    r->error = std::move(why);
    return false;
  }
};

Awaitable<void> sleep_for(Clock::duration d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(use_nothrow);
}

Awaitable<std::error_code> write_header(bench::Stream& s, char kind, uint64_t a, uint64_t b,
                                        bool two) {
  std::array<char, 17> h{};
  h[0] = kind;
  std::memcpy(h.data() + 1, &a, 8);
  std::memcpy(h.data() + 9, &b, 8);
  const size_t n = two ? 17 : 9;
  co_return co_await s.write(asio::buffer(h.data(), n));
}

// Reads `want` bytes, comparing each with the seeded stream `expected` and hashing them into
// `got_hash`; bytes_verified counts the ones that matched. False (and r->outcome) on a wrong
// byte or a failed read.
Awaitable<bool> read_checked(bench::Stream& s, uint64_t want, SeededBytes& expected,
                             Sha256& got_hash, Sha256& want_hash, size_t piece,
                             Clock::duration pause, TunnelResult& r, const char* what) {
  Check c{&r};
  std::vector<char> buf(piece);
  std::vector<char> exp(piece);
  uint64_t done = 0;
  while (done < want) {
    const size_t ask = static_cast<size_t>(std::min<uint64_t>(piece, want - done));
    auto [ec, n] = co_await s.read_some(asio::buffer(buf.data(), ask));
    if (ec) {
      co_return c.fail(Outcome::Failed, std::string(what) + ": read failed after " +
                                            std::to_string(done) + " of " + std::to_string(want) +
                                            " bytes: " + ec.message());
    }
    expected.fill(exp.data(), n);
    if (std::memcmp(buf.data(), exp.data(), n) != 0) {
      size_t at = 0;
      while (buf[at] == exp[at]) ++at;
      co_return c.fail(Outcome::Corrupt,
                       std::string(what) + ": wrong byte at offset " + std::to_string(done + at));
    }
    got_hash.update(buf.data(), n);
    want_hash.update(exp.data(), n);
    done += n;
    r.bytes_verified += n;
    if (pause.count() > 0) co_await sleep_for(pause);
  }
  co_return true;
}

// Sends `n` seeded bytes in pieces of varying size, hashing them.
Awaitable<std::error_code> write_seeded(bench::Stream& s, uint64_t n, uint64_t seed,
                                        Sha256& sent_hash) {
  SeededBytes bytes(seed);
  std::mt19937_64 sizes(seed ^ 0x5eedULL);
  std::vector<char> buf(64 * 1024);
  for (uint64_t off = 0; off < n;) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(1 + sizes() % buf.size(), n - off));
    bytes.fill(buf.data(), len);
    sent_hash.update(buf.data(), len);
    if (auto ec = co_await s.write(asio::buffer(buf.data(), len))) co_return ec;
    off += len;
  }
  co_return std::error_code();
}

Awaitable<void> download(bench::Stream& s, const TunnelPlan& p, TunnelResult& r) {
  Check c{&r};
  if (auto ec = co_await write_header(s, bench::wire::kSeeded, p.seed, p.bytes, true)) {
    c.fail(Outcome::Failed, "request not sent: " + ec.message());
    co_return;
  }
  SeededBytes expected(p.seed);
  Sha256 got, want;
  const bool slow = p.kind == Kind::SlowReader;
  const bool reset = p.kind == Kind::Reset;
  const uint64_t until = reset ? p.reset_after : p.bytes;
  const size_t piece = slow ? p.slow_read : 64 * 1024;
  const Clock::duration pause = slow ? Clock::duration(p.slow_pause) : Clock::duration::zero();
  if (!co_await read_checked(s, until, expected, got, want, piece, pause, r, "download")) {
    co_return;
  }
  if (reset) {
    co_await s.reset();
    r.outcome = Outcome::Reset;
    co_return;
  }
  const Sha256::Digest g = got.finish();
  const Sha256::Digest w = want.finish();
  if (g != w) {
    c.fail(Outcome::Corrupt, "download SHA-256 " + Sha256::hex(g) + " != " + Sha256::hex(w));
    co_return;
  }
  if (auto ec = co_await s.close()) {
    c.fail(Outcome::Failed, "close after a verified download: " + ec.message());
    co_return;
  }
  r.outcome = Outcome::Verified;
}

Awaitable<void> echo(bench::Stream& s, const TunnelPlan& p, TunnelResult& r) {
  Check c{&r};
  if (auto ec = co_await write_header(s, bench::wire::kHashedEcho, p.bytes, 0, false)) {
    c.fail(Outcome::Failed, "request not sent: " + ec.message());
    co_return;
  }
  const bool reset = p.kind == Kind::Reset;
  // A reset echo sends only reset_after of the announced bytes: the destination still waits for
  // the rest when the client goes away.
  const uint64_t send = reset ? p.reset_after : p.bytes;
  Sha256 sent;
  std::error_code write_ec;
  bool read_ok = false;
  SeededBytes expected(p.seed);
  Sha256 got, want;
  auto writer = [&]() -> Awaitable<void> {
    write_ec = co_await write_seeded(s, send, p.seed, sent);
  };
  // A failed or wrong read throws, so that && cancels a writer blocked on a tunnel nobody reads.
  auto reader = [&]() -> Awaitable<void> {
    read_ok = co_await read_checked(s, send, expected, got, want, 64 * 1024,
                                    Clock::duration::zero(), r, "echo");
    if (!read_ok) throw std::runtime_error("echo read");
  };
  try {
    auto both = writer() && reader();
    co_await std::move(both);
  } catch (const std::exception&) {
  }
  if (!read_ok) co_return;  // r says why (a wrong byte, or the read failed)
  // The echoed bytes were counted once as they came back; the destination's digest below is
  // the check of the upload direction.
  if (write_ec) {
    c.fail(Outcome::Failed, "echo: write failed: " + write_ec.message());
    co_return;
  }
  if (reset) {
    co_await s.reset();
    r.outcome = Outcome::Reset;
    co_return;
  }
  const Sha256::Digest mine = sent.finish();
  const Sha256::Digest back = got.finish();
  if (back != mine || want.finish() != mine) {
    c.fail(Outcome::Corrupt,
           "echo SHA-256 of the bytes back " + Sha256::hex(back) + " != sent " + Sha256::hex(mine));
    co_return;
  }
  std::array<uint8_t, 32> theirs{};
  size_t have = 0;
  while (have < theirs.size()) {
    auto [ec, n] = co_await s.read_some(asio::buffer(theirs.data() + have, theirs.size() - have));
    if (ec) {
      c.fail(Outcome::Failed, "echo: destination digest not received: " + ec.message());
      co_return;
    }
    have += n;
  }
  if (theirs != mine) {
    c.fail(Outcome::Corrupt, "echo: the destination hashed " + Sha256::hex(theirs) +
                                 ", the client sent " + Sha256::hex(mine));
    co_return;
  }
  r.bytes_verified += p.bytes;  // the upload, checked by the destination's digest
  if (auto ec = co_await s.close()) {
    c.fail(Outcome::Failed, "close after a verified echo: " + ec.message());
    co_return;
  }
  r.outcome = Outcome::Verified;
}

Awaitable<TunnelResult> body(bench::Opener& opener, const std::string& target,
                             const TunnelPlan& plan) {
  TunnelResult r;
  auto [stream, err] = co_await opener.open(target);
  if (!stream) {
    r.outcome = Outcome::Failed;
    r.error = "open: " + err;
    co_return r;
  }
  const bool is_echo = plan.kind == Kind::Echo || (plan.kind == Kind::Reset && plan.reset_echo);
  if (is_echo) {
    co_await echo(*stream, plan, r);
  } else {
    co_await download(*stream, plan, r);
  }
  co_return r;
}

}  // namespace

Awaitable<TunnelResult> run_tunnel(bench::Opener& opener, std::string target, TunnelPlan plan,
                                   std::chrono::milliseconds limit) {
  const Clock::time_point start = Clock::now();
  auto work = body(opener, target, plan);
  auto timeout = sleep_for(limit);
  auto raced = co_await (std::move(work) || std::move(timeout));
  TunnelResult r;
  if (raced.index() == 0) {
    r = std::move(std::get<0>(raced));
  } else {
    r.outcome = Outcome::Stuck;
    r.error = "no end within " + std::to_string(limit.count()) + " ms";
  }
  r.start = start;
  r.end = Clock::now();
  co_return r;
}

}  // namespace konn::soak
