#include "proxy-agent/agent_app.h"

#include <algorithm>
#include <pthread.h>

#include <asio/steady_timer.hpp>

#include "core/admin/status_page.h"
#include "core/config/duration.h"
#include "core/io/allocator.h"
#include "core/io/shutdown.h"
#include "core/kube/kubeconfig.h"
#include "core/log/log_macros.h"
#include "core/profiling/pprof_routes.h"

namespace konn::agent {
namespace {

using core::config::format_go_duration;

spdlog::logger& logger() {
  static const auto log = core::log::get("agent");
  return *log;
}

constexpr std::chrono::seconds kGracefulStopWait{5};
constexpr std::chrono::seconds kAbortStopWait{2};

}  // namespace

unsigned AgentApp::worker_count(unsigned cores) { return std::clamp(cores, 1U, kMaxWorkers); }

AgentApp::AgentApp(const AgentOptions& options)
    : options_(options),
      guard_(control_.get_executor()),
      servers_(std::make_shared<ServerSet>(options_, pool_, control_, stats_, node_stats_)) {}

AgentApp::~AgentApp() { stop(); }

void AgentApp::start() {
  if (started_) return;
  if (options_.count_server_leases) {
    // Loaded before anything starts, so a bad kubeconfig fails the start cleanly.
    auto rest = core::kube::load_daemon_rest_config(options_.kubeconfig);
    LeaseCounter::Settings settings;
    settings.lease_namespace = options_.lease_namespace;
    settings.selector = options_.lease_label_selector;
    settings.poll_interval =
        std::chrono::duration_cast<std::chrono::milliseconds>(options_.lease_poll_interval);
    std::weak_ptr<ServerSet> servers = servers_;
    auto target = core::kube::api_target_from(rest);
    // Upstream's agent has no --kubeconfig-qps: its client keeps client-go's default limit.
    target.limiter = core::kube::make_rate_limiter(0, 0);
    leases_ = std::make_unique<LeaseCounter>(std::move(target), std::move(settings), metrics_,
                                             [servers](int64_t count) {
                                               if (auto s = servers.lock())
                                                 s->set_lease_count(count);
                                             });
    KONN_LOG((&logger()), info, "counting server leases at {} ({})", rest.server, rest.source);
  }
  started_ = true;
  pool_.start();
  core::io::start_memory_trimmer(control_);
  control_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "agent-control");
    control_.run();
  });
  servers_->start();
  if (leases_) leases_->start();
  if (!options_.node_to_control_plane_listen.empty()) {
    node_listener_ =
        std::make_shared<NodeListener>(options_, control_, pool_, servers_, node_stats_);
    node_listener_->start();
  }
  start_listeners();
  if (options_.enable_contention_profiling) {
    KONN_LOG((&logger()), warn, "--enable-contention-profiling: {}",
             core::profiling::kContentionExplanation);
  }
}

void AgentApp::start_listeners() {
  certificates_.add("server", "client", options_.agent_cert);
  certificates_.add("server", "ca", options_.ca_cert);
  status_ = std::make_unique<AgentStatus>(options_, *servers_, stats_, certificates_);
  // konn_ready: 1 when /readyz passes (a server is connected); what manifests/monitoring's
  // readiness alert compares with.
  auto& ready_gauge = prometheus::BuildGauge()
                          .Name("konn_ready")
                          .Help("konn: 1 when /readyz passes (a server is connected), else 0")
                          .Register(metrics_.registry().prometheus())
                          .Add({});
  auto metrics = [this, &ready_gauge](const std::string&) {
    ready_gauge.Set(servers_->connected() > 0 ? 1 : 0);
    certificates_.refresh();
    return core::admin::Response{
        200, "text/plain; version=0.0.4; charset=utf-8", metrics_.serialize(), {}};
  };
  auto ok = [](const std::string&) { return core::admin::Response{200, "text/plain", "ok", {}}; };
  auto ready = [this](const std::string& query) {
    std::vector<core::admin::Check> checks{
        {"ping", [] { return std::optional<std::string>(); }},
        {"server-connected",
         [this]() -> std::optional<std::string> {
           if (servers_->connected() > 0) return std::nullopt;
           return "no servers connected";
         }},
    };
    return core::admin::readiness(checks, query.find("verbose") != std::string::npos);
  };
  try {
    health_ = std::make_unique<core::admin::AdminServer>(
        "health", options_.health_server_host, static_cast<uint16_t>(options_.health_server_port));
    health_->route("/healthz", ok);
    health_->route("/readyz", ready);
    health_->route("/ready", ready);
    health_->route("/metrics", metrics);
    health_->start();
    KONN_LOG((&logger()), info, "health listener on {}:{}", options_.health_server_host,
             health_->port());
  } catch (const std::exception& e) {
    KONN_LOG((&logger()), err, "health listener not started: {}", e.what());
    health_.reset();
  }
  try {
    admin_ = std::make_unique<core::admin::AdminServer>(
        "admin", options_.admin_bind_address, static_cast<uint16_t>(options_.admin_server_port));
    admin_->route("/metrics", metrics);
    core::profiling::add_pprof_routes(
        *admin_, {options_.enable_profiling, options_.enable_contention_profiling});
    core::admin::route_status(*admin_, "proxy-agent " + options_.agent_id,
                              options_.admin_bind_address, options_.status_page_off_loopback,
                              "--status-page-off-loopback", [this](const std::string& query) {
                                certificates_.refresh();
                                return status_->build(query);
                              });
    admin_->start();
    KONN_LOG((&logger()), info, "admin listener on {}:{}{}", options_.admin_bind_address,
             admin_->port(), options_.enable_profiling ? " (with /debug/pprof/)" : "");
  } catch (const std::exception& e) {
    KONN_LOG((&logger()), err, "admin listener not started: {}", e.what());
    admin_.reset();
  }
}

void AgentApp::drain() {
  asio::post(control_, [this] {
    // Node-side clients go elsewhere at once (their next connect is refused by the kernel, or
    // reaches the agent that replaces this one); their open connections are closed now rather
    // than held until the drain ends.
    if (node_listener_) node_listener_->stop();
    servers_->close_node_connections("agent draining");
    servers_->drain();
    // The agent stays up, as upstream's does: the servers still route to it when every agent
    // drains (a DaemonSet rolled with a large maxUnavailable), so leaving once the last tunnel
    // closes could leave a cluster with no agent at all. It leaves on a second signal (kubelet's
    // SIGKILL at the pod's grace period) or at --drain-timeout.
    if (options_.drain_timeout.count() > 0) {
      asio::co_spawn(control_, watch_drain(), asio::detached);
    }
  });
}

core::io::Awaitable<void> AgentApp::watch_drain() {
  asio::steady_timer timer(control_);
  timer.expires_after(options_.drain_timeout);
  co_await timer.async_wait(core::io::use_nothrow);
  KONN_LOG((&logger()), info, "drain timeout ({}) reached: exiting with {} endpoint connection(s)",
           format_go_duration(options_.drain_timeout), servers_->endpoint_connections());
  finish(0);
}

void AgentApp::finish(int exit_code, bool graceful) {
  {
    std::lock_guard lock(exit_mu_);
    if (!exit_code_) {
      exit_code_ = exit_code;
      exit_graceful_ = graceful;
    }
  }
  exit_cv_.notify_all();
}

void AgentApp::stop(bool graceful) {
  if (stopped_) return;
  stopped_ = true;
  if (leases_) leases_->stop();
  if (node_listener_) node_listener_->stop();
  if (started_) {
    bool done = servers_->stop(!graceful, graceful ? kGracefulStopWait : kAbortStopWait);
    if (!done && graceful) done = servers_->stop(true, kAbortStopWait);
    if (!done) KONN_LOG((&logger()), warn, "some server streams did not finish in time");
  }
  if (health_) health_->stop();
  if (admin_) admin_->stop();
  guard_.reset();
  control_.stop();
  if (control_thread_.joinable()) control_thread_.join();
  pool_.stop();
}

int AgentApp::run() {
  core::io::ShutdownSignals signals(
      control_,
      [this](int sig) {
        KONN_LOG((&logger()), info, "signal {}: draining; serving until a second signal{}", sig,
                 options_.drain_timeout.count() > 0
                     ? " or --drain-timeout (" + format_go_duration(options_.drain_timeout) + ")"
                     : std::string());
        drain();
      },
      [this](int sig) {
        // The end of a drain, as upstream's agent exits on its second signal: status 0.
        KONN_LOG((&logger()), info, "signal {} again: exiting now", sig);
        finish(0, false);
      });
  try {
    start();
  } catch (const std::exception& e) {
    KONN_LOG((&logger()), critical, "{}", e.what());
    return 1;
  }
  int code = 0;
  bool graceful = true;
  {
    std::unique_lock lock(exit_mu_);
    exit_cv_.wait(lock, [this] { return exit_code_.has_value(); });
    code = *exit_code_;
    graceful = exit_graceful_;
  }
  stop(graceful);
  return code;
}

}  // namespace konn::agent
