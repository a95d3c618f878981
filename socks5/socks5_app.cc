#include "socks5/socks5_app.h"

#include <system_error>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/ip/v6_only.hpp>
#include <asio/steady_timer.hpp>

#include "core/admin/status_page.h"
#include "core/error/check.h"
#include "core/io/allocator.h"
#include "core/io/shutdown.h"
#include "core/log/log_macros.h"
#include "core/log/rate_limit.h"

namespace konn::socks5 {

using asio::ip::tcp;

namespace {
const std::shared_ptr<spdlog::logger>& app_logger() {
  static auto log = core::log::get("socks5");
  return log;
}
std::string detail_address(const tcp::endpoint& peer) {
  auto a = peer.address();
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  }
  return a.to_string() + ":" + std::to_string(peer.port());
}
}  // namespace

Socks5App::Socks5App(const Socks5Options& options)
    : options_(options),
      registry_(options.max_sessions, options.max_sessions_per_client),
      pool_(static_cast<unsigned>(options.workers)),
      drain_timer_(main_) {
  if (options_.konnectivity.enabled()) {
    konnectivity_ = std::make_unique<core::konnectivity::Dialer>(options_.konnectivity);
  }
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
  open_listeners();
}

void Socks5App::open_listeners() {
  asio::ip::tcp::endpoint ep;
  bool any = options_.bind_address.empty() || options_.bind_address == "::";
  if (any) {
    ep = tcp::endpoint(tcp::v6(), static_cast<uint16_t>(options_.port));
  } else {
    std::error_code ec;
    auto addr = asio::ip::make_address(options_.bind_address, ec);
    if (ec) throw std::runtime_error("--bind-address " + options_.bind_address + ": not an IP");
    ep = tcp::endpoint(addr, static_cast<uint16_t>(options_.port));
  }
  using reuse_port = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;
  for (size_t i = 0; i < pool_.size(); ++i) {
    auto a = std::make_unique<tcp::acceptor>(pool_.at(i));
    std::error_code ec;
    a->open(ep.protocol(), ec);
    if (!ec && any) a->set_option(asio::ip::v6_only(false), ec);
    if (!ec) a->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) a->set_option(reuse_port(true), ec);
    if (!ec) a->bind(ep, ec);
    if (!ec) a->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      throw std::system_error(
          ec, "listen on " + options_.bind_address + ":" + std::to_string(ep.port()));
    }
    if (i == 0) ep = a->local_endpoint();  // port 0 becomes the port every worker shares
    acceptors_.push_back(std::move(a));
  }
  endpoint_ = ep;
}

Socks5App::~Socks5App() {
  if (health_) health_->stop();
  auth_pool_.stop();
  auth_pool_.join();
  pool_.stop();
  // Resolvers hold descriptors registered with the pool's contexts: release them first.
  resolvers_.clear();
  // Sessions are gone with the pool; streams still closing are cancelled by the dialer.
  konnectivity_.reset();
}

void Socks5App::start_health() {
  if (options_.health_port < 0) return;
  auto ok = [](const std::string&) { return core::admin::Response{200, "text/plain", "ok", {}}; };
  certificates_.add("konnectivity", "client", options_.konnectivity.client_cert);
  certificates_.add("konnectivity", "ca", options_.konnectivity.ca_cert);
  auto metrics = [this](const std::string&) {
    certificates_.refresh();
    return core::admin::Response{
        200, "text/plain; version=0.0.4; charset=utf-8", metrics_.registry().serialize(), {}};
  };
  auto ready = [this](const std::string& query) {
    std::vector<core::admin::Check> checks{
        {"listening", [this]() -> std::optional<std::string> {
           if (accepting_.load()) return std::nullopt;
           return "not accepting SOCKS clients (starting or shutting down)";
         }}};
    if (konnectivity_) {
      checks.push_back({"konnectivity", [this]() -> std::optional<std::string> {
                          return konnectivity_->probe(std::chrono::seconds(1));
                        }});
    }
    return core::admin::readiness(checks, query.find("verbose") != std::string::npos);
  };
  health_ = std::make_unique<core::admin::AdminServer>("health", options_.health_bind_address,
                                                       static_cast<uint16_t>(options_.health_port));
  health_->route("/healthz", ok);
  health_->route("/livez", ok);
  health_->route("/readyz", ready);
  health_->route("/metrics", metrics);
  // What the daemon is doing, on the health listener: only when it listens on loopback, or
  // with --status-page-off-loopback (a 403 otherwise; the default binds every address).
  core::admin::route_status(*health_, "socks5", options_.health_bind_address,
                            options_.status_page_off_loopback, "--status-page-off-loopback",
                            [this](const std::string& query) { return status_.build(query); });
  if (!health_->start_unless_default_taken(options_.health_port_set)) health_.reset();
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

core::io::Awaitable<void> Socks5App::accept_loop(tcp::acceptor& acceptor,
                                                 core::io::DescriptorReserve& reserve) {
  for (;;) {
    // Taken before the accept: the accepted socket registers on this worker at once.
    auto lease = reserve.take(2);
    auto [ec, socket] = co_await acceptor.async_accept(core::io::use_nothrow);
    if (ec) {
      if (!acceptor.is_open() || ec == asio::error::operation_aborted) co_return;
      KONN_LOG(app_logger(), warn, "accept: {}", ec.message());
      if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space) {
        // Out of file descriptors: back off briefly instead of spinning.
        asio::steady_timer t(acceptor.get_executor(), std::chrono::milliseconds(50));
        co_await t.async_wait(core::io::use_nothrow);
      }
      continue;
    }
    std::error_code pec;
    auto peer = socket.remote_endpoint(pec);
    if (pec) continue;
    SessionRegistry::Refusal refusal;
    auto slot = registry_.admit(peer.address(), socket.get_executor(), &refusal, peer.port());
    if (!slot) {
      metrics_.session_refused(refusal.limit);
      registry_.record_failure({std::chrono::system_clock::now(), detail_address(peer), "-", "-",
                                -1, "-", refusal.text});
      // A client hammering a limit gets one line a second; the metric counts every refusal.
      static core::log::RateLimit refusals_logged;
      if (uint64_t held = 0; refusals_logged.allow(&held)) {
        KONN_LOG(app_logger(), warn, "refused {}: {}{}", peer.address().to_string(), refusal.text,
                 held > 0 ? " (" + std::to_string(held) + " more refusals since the last line)"
                          : std::string());
      }
      continue;  // the socket closes here, unanswered
    }
    SessionEnv env{options_,
                   users_.get(),
                   resolver_for(socket.get_executor()),
                   auth_pool_.get_executor(),
                   konnectivity_.get(),
                   &metrics_};
    // The session starts on this thread and stays on it.
    auto ex = socket.get_executor();
    asio::co_spawn(ex,
                   core::io::run_leased(run_session(std::move(socket), env, std::move(slot)),
                                        std::move(lease)),
                   asio::detached);
  }
}

void Socks5App::stop() {
  asio::post(main_, [this] { begin_shutdown(); });
}

void Socks5App::begin_shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  accepting_ = false;
  if (acceptors_.empty()) {
    begin_drain();
    return;
  }
  // Each listening socket is closed on its own thread; the drain (and its log line, which says
  // new connections are refused) begins once the last one is.
  auto open = std::make_shared<std::atomic<size_t>>(acceptors_.size());
  for (auto& a : acceptors_) {
    asio::post(a->get_executor(), [this, acc = a.get(), open] {
      std::error_code ignored;
      acc->close(ignored);
      if (open->fetch_sub(1) == 1) asio::post(main_, [this] { begin_drain(); });
    });
  }
}

void Socks5App::begin_drain() {
  KONN_LOG(app_logger(), info, "shutting down: draining {} sessions for up to {}", registry_.active(),
           core::config::format_go_duration(options_.graceful_shutdown_timeout));
  drain_deadline_ = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        options_.graceful_shutdown_timeout);
  poll_drain();
}

void Socks5App::poll_drain() {
  if (registry_.active() == 0) {
    KONN_LOG(app_logger(), info, "all sessions closed");
    main_.stop();
    return;
  }
  if (!forced_ && std::chrono::steady_clock::now() >= drain_deadline_) {
    forced_ = true;
    KONN_LOG(app_logger(), info, "grace period over: closing {} sessions", registry_.active());
    registry_.close_all();
    drain_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  } else if (forced_ && std::chrono::steady_clock::now() >= drain_deadline_) {
    KONN_LOG(app_logger(), warn, "{} sessions did not close; exiting", registry_.active());
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
        KONN_LOG(app_logger(), info, "signal {}: graceful shutdown", sig);
        begin_shutdown();
      },
      [this](int sig) {
        KONN_LOG(app_logger(), warn, "signal {} again: closing every session now", sig);
        forced_ = true;
        registry_.close_all();
        drain_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      });
  for (size_t i = 0; i < acceptors_.size(); ++i) {
    asio::co_spawn(acceptors_[i]->get_executor(), accept_loop(*acceptors_[i], pool_.reserve(i)),
                   asio::detached);
  }
  pool_.start();
  auto ep = endpoint_;
  KONN_LOG(app_logger(), info, "listening on {}:{} ({} workers, auth {}, {} rules, default {})",
           ep.address().to_string(), ep.port(), pool_.size(), users_ ? "user/pass" : "none",
           options_.rule_set.size(), options_.default_policy);
  if (konnectivity_) {
    KONN_LOG(app_logger(), info, "CONNECT goes through the Konnectivity proxy-server: {}",
             options_.konnectivity.describe());
  }
  accepting_ = true;
  // After the "listening on" line, which scripts and tests look for first.
  start_health();
  core::io::start_memory_trimmer(main_);
  main_.run();  // the signal wait keeps it running until the drain calls stop()
  registry_.close_all();
  pool_.stop();
  return 0;
}

}  // namespace konn::socks5
