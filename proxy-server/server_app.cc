#include "proxy-server/server_app.h"

#include <chrono>
#include <cstdlib>
#include <stdexcept>

#include <asio/execution/context.hpp>
#include <asio/query.hpp>
#include <asio/steady_timer.hpp>
#include <openssl/ssl.h>

#include "core/admin/status_page.h"
#include "core/io/allocator.h"
#include "core/io/shutdown.h"
#include "core/kube/api_client.h"
#include "core/kube/kubeconfig.h"
#include "core/kube/lease.h"
#include "core/log/log_macros.h"
#include "core/profiling/pprof_routes.h"
#include "core/tls/reloading_context.h"
#include "proxy-server/auth/token_reviewer.h"
#include "proxy-server/backend/backend.h"
#include "proxy-server/frontend/grpc_frontend_reactor.h"
#include "proxy-server/frontend/http_connect_frontend.h"
#include "proxy-server/lease_controller.h"
#include "proxy-server/node/node_service.h"
#include "proxy-server/status/server_status.h"
#include "proxy-server/tunnel/router.h"

namespace konn::server {
namespace {

constexpr size_t kMaxMessageBytes = 16 * 1024 * 1024;
constexpr char kProxyPath[] = "/ProxyService/Proxy";
constexpr char kConnectPath[] = "/AgentService/Connect";

// Unlimited in effect: kube-apiserver shares one HTTP/2 connection for all its dials, and
// --max-frontend-streams is the limit that counts.
constexpr uint32_t kUnlimitedStreams = 0x7fffffff;
// gRPC's defaults for a server's policing of client PINGs: at most one per 5 minutes, none while
// no call is open; agents may ping every 30 s, with or without calls (as upstream allows).
constexpr std::chrono::minutes kFrontendMinPingInterval{5};
constexpr std::chrono::seconds kAgentMinPingInterval{30};
// Agents' TLS handshakes holding a slot at once, per worker (core/h2 handshake admission). A
// handshake costs the server about 1 ms of CPU, so 64 in flight finish within a few tens of
// milliseconds on a busy worker, and a slow client holds its slot for at most a second.
constexpr size_t kAgentHandshakesPerWorker = 64;

std::chrono::milliseconds to_millis(Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d);
}

// The io_context a listener's connection runs on (its transport's executor).
asio::io_context& home_of(const core::h2::Connection& conn) {
  return static_cast<asio::io_context&>(asio::query(conn.executor(), asio::execution::context));
}

// A call for a method this listener does not serve: UNIMPLEMENTED, naming the one it does.
void refuse_method(core::h2::Stream& stream, const core::h2::CallInfo& call, const char* served) {
  stream.finish({core::h2::grpc_code::kUnimplemented,
                 "unknown method " + call.path + " (this listener serves " + served + ")"});
}

std::string bind_spec(const std::string& address, int port) {
  std::string host = address.empty() ? "[::]" : address;
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  return host + ":" + std::to_string(port);
}

// How often a draining server looks whether its tunnels are gone (they end on many threads).
constexpr std::chrono::milliseconds kDrainPoll{50};

// The client-side rate limit of the apiserver calls, for the start-up log.
std::string api_limit_text(const ServerOptions& o) {
  auto limiter = core::kube::make_rate_limiter(o.kubeconfig_qps, o.kubeconfig_burst);
  if (!limiter) return "no client-side rate limit (--kubeconfig-qps < 0)";
  return fmt::format("at most {:g} requests/s, burst {}", limiter->qps(), limiter->burst());
}

}  // namespace

ServerApp::ServerApp(const ServerOptions& options)
    : options_(options), log_(core::log::get("server")) {}

ServerApp::~ServerApp() { shutdown(); }

void ServerApp::start() {
  if (auto ciphers = options_.openssl_ciphers(); !ciphers.empty()) {
    // Every TLS listener's context is built with them (ReloadingServerContext).
    KONN_LOG(log_, info, "TLS 1.2 cipher suites restricted to {}", ciphers);
  }
  if (options_.openssl_min_version() == TLS1_3_VERSION) {
    KONN_LOG(log_, info, "TLS 1.3 required on the agent port and the TCP frontend");
  }
  timers_guard_ = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
      timers_.get_executor());
  core::io::start_memory_trimmer(timers_);
  timer_thread_ = std::thread([this] { timers_.run(); });
  router_ = std::make_unique<Router>(options_, timers_, metrics_);
  if (!options_.node_to_control_plane_destinations.empty()) {
    node_ = std::make_unique<NodeService>(options_, registry_);
    node_->start();
    router_->set_node(node_.get());
  }
  if (!options_.agent_namespace.empty()) start_token_review();
  start_admin();
  // Every connection, frontend or agent, lives on one worker of this pool, which runs its calls'
  // reactions; a frontend's connection goes beside the agent connection its dial will most
  // likely use, so a packet crosses no thread between the two.
  pool_ = std::make_unique<core::io::WorkerPool>(0, "server-worker");
  pool_->start();
  if (options_.mode == "http-connect") {
    start_http_connect();
  } else {
    start_grpc_frontend();
  }
  // A frontend's accept waits with a placement chosen beforehand; when agents come or go, the
  // one waiting is placed again, so the first connection after the change goes beside its agent.
  router_->set_on_backends_changed([this] {
    if (frontend_listener_) frontend_listener_->reconsider_placement();
    if (http_connect_) http_connect_->reconsider_placement();
  });
  start_agent_listener();
  // Published only now: a lease tells agents there is one more server to reach.
  if (options_.enable_lease_controller) start_leases();
}

void ServerApp::start_leases() {
  auto rest = core::kube::load_daemon_rest_config(options_.kubeconfig);
  std::vector<std::string> ignored;  // validated with the options
  LeaseController::Settings settings;
  settings.server_id = options_.server_id;
  settings.lease_namespace = options_.lease_namespace;
  settings.labels = core::kube::parse_label_set(options_.lease_label, &ignored);
  settings.renew_interval =
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.lease_renew_interval);
  auto target = core::kube::api_target_from(rest);
  // A bucket of its own (upstream's client has one per API group unless --kubeconfig-qps is
  // set): a storm of agent TokenReviews never delays the renewal of this server's lease.
  target.limiter =
      core::kube::make_rate_limiter(options_.kubeconfig_qps, options_.kubeconfig_burst);
  leases_ = std::make_unique<LeaseController>(std::move(target), std::move(settings), metrics_);
  KONN_LOG(log_, info, "lease controller: apiserver {} ({}), {}", rest.server, rest.source,
           api_limit_text(options_));
  leases_->start();
}

void ServerApp::start_token_review() {
  auto rest = core::kube::load_daemon_rest_config(options_.kubeconfig);
  auto target = core::kube::api_target_from(rest);
  target.limiter =
      core::kube::make_rate_limiter(options_.kubeconfig_qps, options_.kubeconfig_burst);
  reviewer_ = std::make_unique<TokenReviewer>(
      std::move(target), options_.authentication_audience, options_.agent_namespace,
      options_.agent_service_account, timers_.get_executor(),
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.authentication_timeout));
  router_->set_reviewer(reviewer_.get());
  KONN_LOG(log_, info,
           "agents authenticate with service-account tokens: TokenReview at {} ({}), audience {}, "
           "account system:serviceaccount:{}:{}, {}",
           rest.server, rest.source, options_.authentication_audience, options_.agent_namespace,
           options_.agent_service_account, api_limit_text(options_));
}

void ServerApp::start_http_connect() {
  http_connect_ =
      std::make_unique<HttpConnectServer>(*router_, *pool_, [this] { return place_frontend(); });
  if (!options_.uds_name.empty()) {
    http_connect_->listen_unix(options_.uds_name, options_.delete_existing_uds_file);
    KONN_LOG(log_, info, "frontend (http-connect) listening on unix:{}", options_.uds_name);
  } else {
    core::tls::ServerTlsConfig tls;
    tls.cert_file = options_.server_cert;
    tls.key_file = options_.server_key;
    tls.client_ca_file = options_.server_ca_cert;
    tls.alpn = {"http/1.1"};
    certificates_.add("frontend", "serving", options_.server_cert);
    certificates_.add("frontend", "ca", options_.server_ca_cert);
    tls.min_version = options_.openssl_min_version();
    http_connect_->listen_tls(options_.server_bind_address, options_.server_port, tls,
                              options_.cert_reload_interval, options_.openssl_ciphers(),
                              [this] { certificates_.refresh(); });
    frontend_port_ = http_connect_->port();
    KONN_LOG(log_, info, "frontend (http-connect, mTLS) listening on {}",
             bind_spec(options_.server_bind_address, frontend_port_));
  }
}

size_t ServerApp::worker_index(const asio::io_context& ctx) const {
  for (size_t i = 0; i < pool_->size(); ++i) {
    if (&pool_->at(i) == &ctx) return i;
  }
  return 0;
}

core::io::WorkerPool::Placement ServerApp::place_frontend() {
  // Beside the agent connection the dial will most likely use: its packets then cross no thread.
  if (auto home = router_->backends().likely_home()) return pool_->place_at(*home);
  return pool_->place();
}

std::unique_ptr<core::tls::ReloadingServerContext> ServerApp::serve_tls(
    core::h2::Listener& listener, const std::string& cert, const std::string& key,
    const std::string& client_ca, const std::string& what) {
  core::tls::ServerTlsConfig tls;
  tls.cert_file = cert;
  tls.key_file = key;
  tls.client_ca_file = client_ca;
  tls.alpn = {"h2"};
  certificates_.add(what, "serving", cert);
  certificates_.add(what, "ca", client_ca);
  tls.min_version = options_.openssl_min_version();
  auto files = std::make_unique<core::tls::ReloadingServerContext>(
      timers_.get_executor(), std::move(tls), options_.openssl_ciphers(),
      options_.cert_reload_interval, what,
      [this, &listener](std::shared_ptr<asio::ssl::context> ctx) {
        listener.set_tls_context(std::move(ctx));
        certificates_.refresh();
      });
  listener.set_tls_context(files->current());
  return files;
}

void ServerApp::start_grpc_frontend() {
  core::h2::ListenerOptions lo;
  lo.name = "frontend";
  lo.connection.max_concurrent_streams = kUnlimitedStreams;
  lo.connection.max_message_bytes = kMaxMessageBytes;
  lo.connection.keepalive_interval = to_millis(options_.frontend_keepalive_time);
  lo.connection.min_peer_ping_interval = kFrontendMinPingInterval;
  lo.connection.peer_pings_without_calls = false;
  lo.handshake_timeout = to_millis(options_.tls_handshake_timeout);
  lo.on_handshake_timeout = [this] { metrics_.limit_hit("handshake_timeout"); };
  lo.place = [this] { return place_frontend(); };
  auto on_accept = [this](const std::shared_ptr<core::h2::Connection>& conn,
                          const core::h2::PeerInfo& peer) -> core::h2::Connection::CallHandler {
    auto& home = home_of(*conn);
    return [this, &home, peer](const std::shared_ptr<core::h2::Stream>& stream,
                               const core::h2::CallInfo& call) {
      if (call.path != kProxyPath) {
        if (call.path == kConnectPath) {
          // Agents reach the server on the agent port only.
          KONN_LOG(log_, warn,
                   "agent stream from {} refused: agents connect to the agent port, not the "
                   "frontend's listener",
                   peer.address);
          router_->metrics().agent_rejected("listener");
        }
        refuse_method(*stream, call, kProxyPath);
        return;
      }
      GrpcFrontend::serve(home, stream, peer, *router_);
    };
  };
  frontend_listener_ =
      std::make_unique<core::h2::Listener>(timers_, *pool_, std::move(lo), std::move(on_accept));
  if (!options_.uds_name.empty()) {
    try {
      frontend_listener_->listen_unix(options_.uds_name, options_.delete_existing_uds_file, 0770);
    } catch (const std::exception& e) {
      throw std::runtime_error("cannot serve the frontend on unix socket " + options_.uds_name +
                               ": " + e.what());
    }
    KONN_LOG(log_, info, "frontend (grpc) listening on unix:{}", options_.uds_name);
    return;
  }
  frontend_tls_ = serve_tls(*frontend_listener_, options_.server_cert, options_.server_key,
                            options_.server_ca_cert, "frontend");
  try {
    frontend_listener_->listen_tcp(options_.server_bind_address,
                                   static_cast<uint16_t>(options_.server_port));
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot serve the frontend on " +
                             bind_spec(options_.server_bind_address, options_.server_port) + ": " +
                             e.what());
  }
  frontend_port_ = frontend_listener_->port();
  KONN_LOG(log_, info, "frontend (grpc, mTLS) listening on {}",
           bind_spec(options_.server_bind_address, frontend_port_));
}

void ServerApp::start_agent_listener() {
  // Agents: always TLS; mTLS when --cluster-ca-cert is given.
  core::h2::ListenerOptions lo;
  lo.name = "agent";
  // A reconnect storm (every agent back at once after a restart) finishes the handshakes it
  // begins: 19 000 simulated agents were back in 25 s at a steady 1 000 handshakes/s; without the
  // bound, 43 s, with 27 000 handshakes begun and timed out (bench/fleet/README.md).
  lo.max_handshakes_per_worker = kAgentHandshakesPerWorker;
  lo.connection.max_message_bytes = kMaxMessageBytes;
  lo.connection.keepalive_interval = to_millis(options_.keepalive_time);
  lo.connection.min_peer_ping_interval = kAgentMinPingInterval;
  lo.connection.peer_pings_without_calls = true;
  lo.handshake_timeout = to_millis(options_.tls_handshake_timeout);
  lo.on_handshake_timeout = [this] { metrics_.limit_hit("handshake_timeout"); };
  auto on_accept = [this](const std::shared_ptr<core::h2::Connection>& conn,
                          const core::h2::PeerInfo& peer) -> core::h2::Connection::CallHandler {
    auto& home = home_of(*conn);
    size_t index = worker_index(home);
    return [this, &home, index, peer](
               const std::shared_ptr<core::h2::Stream>& stream, const core::h2::CallInfo& call) {
      if (call.path != kConnectPath) {
        refuse_method(*stream, call, kConnectPath);
        return;
      }
      Backend::serve(home, index, stream, call, peer, *router_);
    };
  };
  agent_listener_ =
      std::make_unique<core::h2::Listener>(timers_, *pool_, std::move(lo), std::move(on_accept));
  agent_tls_ = serve_tls(*agent_listener_, options_.cluster_cert, options_.cluster_key,
                         options_.cluster_ca_cert, "agent");
  try {
    agent_listener_->listen_tcp(options_.agent_bind_address,
                                static_cast<uint16_t>(options_.agent_port));
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot listen for agents on " +
                             bind_spec(options_.agent_bind_address, options_.agent_port) + ": " +
                             e.what());
  }
  agent_port_ = agent_listener_->port();
  KONN_LOG(log_, info, "agent listener (grpc, {}) on {}",
           options_.cluster_ca_cert.empty() ? "TLS" : "mTLS",
           bind_spec(options_.agent_bind_address, agent_port_));
}

void ServerApp::start_admin() {
  // konn_ready (1: /readyz passes) and konn_server_limit{limit} (the configured limits, 0 for
  // none): what the alert rules of manifests/monitoring compare with.
  auto& ready_gauge = prometheus::BuildGauge()
                          .Name("konn_ready")
                          .Help("konn: 1 when /readyz passes (an agent is connected and the server "
                                "is not shutting down), else 0")
                          .Register(registry_.prometheus())
                          .Add({});
  auto& limits = prometheus::BuildGauge()
                     .Name("konn_server_limit")
                     .Help("konn: the configured limits (0: none), by limit as in "
                           "limits_hit_total")
                     .Register(registry_.prometheus());
  limits.Add({{"limit", "frontend_streams"}}).Set(options_.max_frontend_streams);
  limits.Add({{"limit", "pending_dials"}}).Set(options_.max_pending_dials);
  limits.Add({{"limit", "pending_dials_per_agent"}}).Set(options_.max_pending_dials_per_agent);
  limits.Add({{"limit", "tunnels_per_agent"}}).Set(options_.max_tunnels_per_agent);
  auto metrics = [this, &ready_gauge](const std::string&) {
    ready_gauge.Set(!draining_ && router_->backends().ready() ? 1 : 0);
    if (node_) node_->update_metrics();
    return core::admin::Response{
        200, "text/plain; version=0.0.4; charset=utf-8", registry_.serialize(), {}};
  };
  auto ok = [](const std::string&) { return core::admin::Response{200, "text/plain", "ok", {}}; };
  auto ready = [this](const std::string& query) {
    std::vector<core::admin::Check> checks{{"ping", [] { return std::optional<std::string>(); }},
                                           {"shutdown",
                                            [this]() -> std::optional<std::string> {
                                              if (!draining_) return std::nullopt;
                                              return "server is shutting down";
                                            }},
                                           {"backends", [this]() -> std::optional<std::string> {
                                              if (router_->backends().ready()) return std::nullopt;
                                              return "no connection to any proxy agent";
                                            }}};
    return core::admin::readiness(checks, query.find("verbose") != std::string::npos);
  };
  health_ = std::make_unique<core::admin::AdminServer>("health", options_.health_bind_address,
                                                       options_.health_port);
  health_->route("/healthz", ok);
  health_->route("/livez", ok);
  health_->route("/readyz", ready);
  health_->route("/ready", ready);
  health_->route("/metrics", metrics);
  health_->start();
  admin_ = std::make_unique<core::admin::AdminServer>("admin", options_.admin_bind_address,
                                                      options_.admin_port);
  admin_->route("/metrics", metrics);
  core::profiling::add_pprof_routes(
      *admin_, {options_.enable_profiling, options_.enable_contention_profiling});
  status_ = std::make_unique<ServerStatus>(*router_, options_, certificates_,
                                           [this] { return draining_.load(); });
  core::admin::route_status(*admin_, "proxy-server " + options_.server_id,
                            options_.admin_bind_address, options_.status_page_off_loopback,
                            "--status-page-off-loopback",
                            [this](const std::string& query) { return status_->build(query); });
  admin_->start();
  if (options_.enable_profiling) {
    KONN_LOG(log_, info, "profiling: /debug/pprof/ on the admin port {}", admin_->port());
  }
  if (options_.enable_contention_profiling) {
    KONN_LOG(log_, warn, "--enable-contention-profiling: {}",
             core::profiling::kContentionExplanation);
  }
}

int ServerApp::run() {
  core::io::ShutdownSignals signals(
      signals_ctx_,
      [this](int sig) {
        KONN_LOG(log_, info,
                 "signal {}: shutting down; open tunnels may finish within {} (a second signal "
                 "exits at once)",
                 sig, core::config::format_go_duration(options_.graceful_shutdown_timeout));
        begin_drain();
      },
      [this](int sig) {
        KONN_LOG(log_, warn, "signal {} again: exiting now", sig);
        log_->flush();
        std::_Exit(1);
      });
  signals_ctx_.run();
  shutdown();
  return 0;
}

void ServerApp::stop() {
  asio::post(signals_ctx_, [this] { signals_ctx_.stop(); });
}

void ServerApp::drain() {
  asio::post(signals_ctx_, [this] { begin_drain(); });
}

double ServerApp::open_tunnels() const {
  return metrics_.grpc_proxy.Value() + metrics_.http_connect.Value();
}

void ServerApp::begin_drain() {
  if (draining_.exchange(true)) return;
  // The lease goes first, so agents counting leases stop looking for this server.
  if (leases_) lease_stopper_ = std::thread([this] { leases_->stop(); });
  auto grace = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      options_.graceful_shutdown_timeout);
  if (grace.count() <= 0) {
    signals_ctx_.stop();
    return;
  }
  drain_deadline_ = std::chrono::steady_clock::now() + grace;
  // Stop listening and refuse new calls (GOAWAY) at once; open calls run on. The watch below
  // decides when to end (no tunnel left, or the graceful timeout); shutdown() closes the rest.
  for (auto* l : {frontend_listener_.get(), agent_listener_.get()}) {
    if (l == nullptr) continue;
    l->stop_accepting();
    l->shutdown_connections();
  }
  if (http_connect_) http_connect_->stop();
  KONN_LOG(log_, info, "draining: not ready, no new frontends or agents, {} tunnel(s) open",
           open_tunnels());
  auto timer = std::make_shared<asio::steady_timer>(signals_ctx_);
  auto watch = std::make_shared<std::function<void()>>();
  *watch = [this, timer, weak = std::weak_ptr<std::function<void()>>(watch)] {
    if (open_tunnels() <= 0) {
      KONN_LOG(log_, info, "drained: no tunnel left");
      signals_ctx_.stop();
      return;
    }
    if (std::chrono::steady_clock::now() >= drain_deadline_) {
      KONN_LOG(log_, info, "graceful shutdown timeout: closing {} tunnel(s)", open_tunnels());
      signals_ctx_.stop();
      return;
    }
    timer->expires_after(kDrainPoll);
    timer->async_wait([weak](const std::error_code& ec) {
      auto next = weak.lock();
      if (!ec && next) (*next)();
    });
  };
  (*watch)();
  // The watch owns itself through its pending wait; released when signals_ctx_ stops.
  drain_watch_ = watch;
}

void ServerApp::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  draining_ = true;
  if (lease_stopper_.joinable()) lease_stopper_.join();
  if (leases_) leases_->stop();
  if (router_) router_->set_on_backends_changed(nullptr);  // before the frontends go
  // Whatever is still open (tunnels past the graceful timeout; agent streams, which never end by
  // themselves) is closed: its calls end UNAVAILABLE on their workers, which then stop.
  if (frontend_listener_) frontend_listener_->stop(std::chrono::milliseconds(0));
  if (http_connect_) http_connect_->stop();
  if (agent_listener_) agent_listener_->stop(std::chrono::milliseconds(0));
  drain_watch_.reset();
  if (pool_) pool_->stop();
  if (node_) node_->stop();
  http_connect_.reset();
  timers_guard_.reset();
  timers_.stop();
  if (health_) health_->stop();
  if (admin_) admin_->stop();
  if (timer_thread_.joinable()) timer_thread_.join();
  KONN_LOG(log_, info, "proxy-server stopped");
}

}  // namespace konn::server
