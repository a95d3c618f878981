#include "socks5/socks5_app.h"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>

#include "core/error/check.h"
#include "core/io/shutdown.h"
#include "core/log/log_macros.h"
#include "core/net/listener.h"

namespace konn::socks5 {

using asio::ip::tcp;

namespace {
const std::shared_ptr<spdlog::logger>& logger() {
  static auto log = core::log::get("socks5");
  return log;
}
}  // namespace

Socks5App::Socks5App(const Socks5Options& options)
    : options_(options),
      registry_(options.max_sessions, options.max_sessions_per_client),
      acceptor_(core::net::listen_tcp(main_, options.bind_address == "::" ? "" : options.bind_address,
                                      static_cast<uint16_t>(options.port))),
      pool_(static_cast<unsigned>(options.workers)),
      drain_timer_(main_) {
  if (!options_.users_file.empty()) {
    users_ = std::make_unique<UserDb>(options_.users_file);
    auto err = users_->load();
    if (!err.empty()) throw std::runtime_error(err);
  }
  core::net::Resolver::Options ro;
  ro.servers = options_.dns_servers;
  ro.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options_.dns_timeout);
  for (size_t i = 0; i < pool_.size(); ++i) {
    resolvers_.emplace_back(&pool_.at(i),
                            std::make_unique<core::net::Resolver>(pool_.at(i).get_executor(), ro));
  }
}

Socks5App::~Socks5App() {
  pool_.stop();
  // Resolvers hold descriptors registered with the pool's contexts: release them first.
  resolvers_.clear();
}

core::net::Resolver& Socks5App::resolver_for(const asio::any_io_executor& ex) {
  auto* owner = &asio::query(ex, asio::execution::context);
  for (auto& [ctx, r] : resolvers_) {
    if (static_cast<asio::execution_context*>(ctx) == owner) return *r;
  }
  // Every accepted socket lives on a pool context; a resolver is single-threaded, so anything
  // else would be a bug, not a fallback.
  KONN_CHECK(false, "session executor is not a worker context");
  return *resolvers_.front().second;
}

core::io::Awaitable<void> Socks5App::accept_loop() {
  for (;;) {
    auto& ctx = pool_.next();
    auto [ec, socket] = co_await acceptor_.async_accept(ctx, core::io::use_nothrow);
    if (ec) {
      if (!acceptor_.is_open() || ec == asio::error::operation_aborted) co_return;
      KONN_LOG(logger(), warn, "accept: {}", ec.message());
      if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space) {
        // Out of file descriptors: back off briefly instead of spinning.
        asio::steady_timer t(main_, std::chrono::milliseconds(50));
        co_await t.async_wait(core::io::use_nothrow);
      }
      continue;
    }
    std::error_code pec;
    auto peer = socket.remote_endpoint(pec);
    if (pec) continue;
    std::string refusal;
    auto slot = registry_.admit(peer.address(), socket.get_executor(), &refusal);
    if (!slot) {
      KONN_LOG(logger(), warn, "refused {}: {}", peer.address().to_string(), refusal);
      continue;  // the socket closes here
    }
    SessionEnv env{options_, users_.get(), resolver_for(socket.get_executor())};
    auto ex = socket.get_executor();
    asio::co_spawn(ex, run_session(std::move(socket), env, std::move(slot)), asio::detached);
  }
}

void Socks5App::stop() {
  asio::post(main_, [this] { begin_shutdown(); });
}

void Socks5App::begin_shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  std::error_code ignored;
  acceptor_.close(ignored);
  KONN_LOG(logger(), info, "shutting down: draining {} sessions for up to {}", registry_.active(),
           core::config::format_go_duration(options_.graceful_shutdown_timeout));
  drain_deadline_ = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        options_.graceful_shutdown_timeout);
  poll_drain();
}

void Socks5App::poll_drain() {
  if (registry_.active() == 0) {
    KONN_LOG(logger(), info, "all sessions closed");
    main_.stop();
    return;
  }
  if (!forced_ && std::chrono::steady_clock::now() >= drain_deadline_) {
    forced_ = true;
    KONN_LOG(logger(), info, "grace period over: closing {} sessions", registry_.active());
    registry_.close_all();
    drain_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  } else if (forced_ && std::chrono::steady_clock::now() >= drain_deadline_) {
    KONN_LOG(logger(), warn, "{} sessions did not close; exiting", registry_.active());
    main_.stop();
    return;
  }
  // Polling (every 20 ms) keeps sessions free of any shutdown bookkeeping on their hot path.
  drain_timer_.expires_after(std::chrono::milliseconds(20));
  drain_timer_.async_wait([this](std::error_code ec) {
    if (!ec) poll_drain();
  });
}

int Socks5App::run() {
  core::io::ShutdownSignals signals(
      main_,
      [this](int sig) {
        KONN_LOG(logger(), info, "signal {}: graceful shutdown", sig);
        begin_shutdown();
      },
      [this](int sig) {
        KONN_LOG(logger(), warn, "signal {} again: closing every session now", sig);
        forced_ = true;
        registry_.close_all();
        drain_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      });
  pool_.start();
  auto ep = acceptor_.local_endpoint();
  KONN_LOG(logger(), info, "listening on {}:{} ({} workers, auth {}, {} rules, default {})",
           ep.address().to_string(), ep.port(), pool_.size(), users_ ? "user/pass" : "none",
           options_.rule_set.size(), options_.default_policy);
  asio::co_spawn(main_, accept_loop(), asio::detached);
  main_.run();
  registry_.close_all();
  pool_.stop();
  return 0;
}

}  // namespace konn::socks5
