#include "core/net/placed_acceptor.h"

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <asio/connect.hpp>
#include <asio/ip/tcp.hpp>
#include <catch2/catch.hpp>

#include "core/net/listener.h"

using namespace std::chrono_literals;
using konn::core::io::WorkerPool;
using konn::core::net::PlacedAcceptor;
using Tcp = asio::ip::tcp;

namespace {

// A PlacedAcceptor on a pool of two workers, started on worker 0, with a scripted placement.
struct Fixture {
  explicit Fixture(bool follow, std::function<size_t(int)> worker_for_accept) {
    pool.start();
    auto listening = konn::core::net::listen_tcp(pool.at(0), "127.0.0.1", 0);
    port = listening.local_endpoint().port();
    acceptor = std::make_shared<PlacedAcceptor<Tcp>>(
        pool.at(0), std::move(listening), follow,
        [this, worker_for_accept] { return pool.place_at(worker_for_accept(placements++)); },
        [this](Tcp::socket s, WorkerPool::Placement p) {
          std::lock_guard lock(mu);
          Seen seen;
          seen.placed = p.index;
          seen.on_placed_thread = p.ctx.get_executor().running_in_this_thread();
          seen.socket_on_placed_ctx = s.get_executor() == asio::any_io_executor(p.ctx.get_executor());
          accepted.push_back(seen);
          sockets.push_back(std::move(s));
        },
        [](const std::error_code&) {});
    acceptor->start();
  }
  ~Fixture() {
    acceptor->stop();
    {
      std::lock_guard lock(mu);
      sockets.clear();  // on this thread: their workers no longer touch them after stop()
    }
    pool.stop();
  }

  // Connects `n` clients one after another and waits until all were accepted.
  void connect(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      Tcp::socket s(client);
      s.connect({asio::ip::make_address("127.0.0.1"), port});
      clients.push_back(std::move(s));
    }
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (accepted_count() < clients.size() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
  }
  size_t accepted_count() {
    std::lock_guard lock(mu);
    return accepted.size();
  }

  struct Seen {
    size_t placed = 0;
    bool on_placed_thread = false;
    bool socket_on_placed_ctx = false;
  };
  WorkerPool pool{2, "acceptor-test"};
  uint16_t port = 0;
  std::atomic<int> placements{0};
  std::shared_ptr<PlacedAcceptor<Tcp>> acceptor;
  std::mutex mu;
  std::vector<Seen> accepted;
  std::vector<Tcp::socket> sockets;
  asio::io_context client;  // the clients' (never run: blocking connects)
  std::vector<Tcp::socket> clients;
};

}  // namespace

TEST_CASE("a following acceptor accepts on the worker the connection is placed on", "[net]") {
  Fixture f(true, [](int) { return size_t{1}; });
  f.connect(3);
  REQUIRE(f.accepted_count() == 3);
  for (const auto& seen : f.accepted) {
    CHECK(seen.placed == 1);
    CHECK(seen.on_placed_thread);  // woken there, not handed over from worker 0
    CHECK(seen.socket_on_placed_ctx);
  }
  CHECK(f.acceptor->current_home() == &f.pool.at(1));
}

TEST_CASE("a following acceptor moves with a placement that changes, losing no connection",
          "[net]") {
  Fixture f(true, [](int i) { return static_cast<size_t>(i % 2); });
  f.connect(20);
  REQUIRE(f.accepted_count() == 20);
  for (size_t i = 0; i < f.accepted.size(); ++i) {
    CHECK(f.accepted[i].placed == i % 2);
    CHECK(f.accepted[i].on_placed_thread);
  }
}

TEST_CASE("an acceptor that does not follow stays where it started", "[net]") {
  Fixture f(false, [](int) { return size_t{1}; });
  f.connect(2);
  REQUIRE(f.accepted_count() == 2);
  for (const auto& seen : f.accepted) {
    CHECK(seen.placed == 1);
    CHECK_FALSE(seen.on_placed_thread);  // accepted on worker 0
    CHECK(seen.socket_on_placed_ctx);    // but registered on worker 1
  }
  CHECK(f.acceptor->current_home() == &f.pool.at(0));
}

TEST_CASE("a stopped acceptor, wherever it moved, accepts nothing more", "[net]") {
  Fixture f(true, [](int) { return size_t{1}; });
  f.connect(1);
  REQUIRE(f.accepted_count() == 1);
  REQUIRE(f.acceptor->current_home() == &f.pool.at(1));
  f.acceptor->stop();  // from this thread, while the listening socket lives on worker 1
  f.acceptor->stop();  // idempotent
  asio::io_context client;
  Tcp::socket s(client);
  std::error_code ec;
  s.connect({asio::ip::make_address("127.0.0.1"), f.port}, ec);
  CHECK(ec == asio::error::connection_refused);  // the listening socket is closed
  std::this_thread::sleep_for(20ms);
  CHECK(f.accepted_count() == 1);
}

TEST_CASE("a following acceptor places its waiting accept again when asked to reconsider",
          "[net]") {
  // The placement says worker 0 until the test switches it to 1, as likely_home() does once an
  // agent connects on worker 1 while an accept already waits with the old choice.
  std::atomic<size_t> target{0};
  Fixture f(true, [&target](int) { return target.load(); });
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (f.placements.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  REQUIRE(f.placements.load() == 1);  // the first accept waits, placed on worker 0
  target = 1;
  f.acceptor->reconsider();
  while (f.placements.load() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  REQUIRE(f.placements.load() == 2);  // placed again, before any connection came
  f.connect(1);
  REQUIRE(f.accepted_count() == 1);
  CHECK(f.accepted[0].placed == 1);
  CHECK(f.accepted[0].on_placed_thread);
  CHECK(f.acceptor->current_home() == &f.pool.at(1));
}

TEST_CASE("reconsider on a stopped acceptor does nothing", "[net]") {
  Fixture f(true, [](int) { return size_t{1}; });
  f.connect(1);
  REQUIRE(f.accepted_count() == 1);
  f.acceptor->stop();
  const int before = f.placements.load();
  f.acceptor->reconsider();
  std::this_thread::sleep_for(20ms);
  CHECK(f.placements.load() == before);
}
