#include "proxy-server/server_app.h"

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <sys/stat.h>

#include <asio/steady_timer.hpp>
#include <grpc/grpc.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "core/io/allocator.h"
#include "core/io/shutdown.h"
#include "core/kube/api_client.h"
#include "core/kube/kubeconfig.h"
#include "core/kube/lease.h"
#include "core/log/log_macros.h"
#include "core/net/listener.h"
#include "core/tls/grpc_credentials.h"
#include "core/tls/tls_context.h"
#include "proxy-server/auth/token_reviewer.h"
#include "proxy-server/backend/agent_service.h"
#include "proxy-server/frontend/http_connect_frontend.h"
#include "proxy-server/frontend/proxy_service.h"
#include "proxy-server/lease_controller.h"
#include "proxy-server/node/node_service.h"
#include "proxy-server/tunnel/router.h"

namespace konn::server {
namespace {

constexpr int kMaxMessageBytes = 16 * 1024 * 1024;

int millis(Duration d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  return ms > INT32_MAX ? INT32_MAX : static_cast<int>(ms);
}

std::string bind_spec(const std::string& address, int port) {
  std::string host = address.empty() ? "[::]" : address;
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  return host + ":" + std::to_string(port);
}

// How often a draining server looks whether its tunnels are gone (they end on many threads).
constexpr std::chrono::milliseconds kDrainPoll{50};
constexpr std::chrono::milliseconds kAgentCallsWait{5000};

}  // namespace

ServerApp::ServerApp(const ServerOptions& options)
    : options_(options), log_(core::log::get("server")) {}

ServerApp::~ServerApp() { shutdown(); }

void ServerApp::start() {
  if (auto ciphers = options_.openssl_ciphers(); !ciphers.empty()) {
    // gRPC core reads its TLS 1.2 cipher list from the environment, once, for every listener.
    ::setenv("GRPC_SSL_CIPHER_SUITES", ciphers.c_str(), 1);
    KONN_LOG(log_, info, "TLS 1.2 cipher suites restricted to {}", ciphers);
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
  proxy_service_ = std::make_unique<ProxyServiceImpl>(*router_);
  agent_service_ = std::make_unique<AgentServiceImpl>(*router_);

  // With the frontend on a unix socket (kube-apiserver's usual set-up), one gRPC server serves
  // both services, so one thread polls every connection and runs every reaction: with two
  // servers, each draining its own queue, gRPC's poller role passed between two threads and a
  // packet often crossed from one to the other. Each service admits only the peers of its own
  // listener (from_unix_socket). Channel arguments are per server, so the frontend keeps a server
  // of its own when its keepalive differs from the agents'.
  const bool shared = options_.mode != "http-connect" && !options_.uds_name.empty() &&
                      options_.frontend_keepalive_time == options_.keepalive_time;
  auto add_unix_frontend = [this](grpc::ServerBuilder& b) {
    if (options_.delete_existing_uds_file) core::net::remove_stale_socket(options_.uds_name);
    b.AddListeningPort("unix:" + options_.uds_name, grpc::InsecureServerCredentials());
  };
  // umask 0007 while binding: the unix socket is created 0770 (owner and group only).
  auto build_with_umask = [](grpc::ServerBuilder& b) {
    mode_t old = ::umask(0007);
    auto server = b.BuildAndStart();
    ::umask(old);
    return server;
  };
  if (options_.mode == "http-connect") {
    start_http_connect();
  } else if (!shared) {
    // Frontend: kube-apiserver shares one HTTP/2 connection for all its dials, so the number of
    // concurrent streams is left unlimited.
    grpc::ServerBuilder b;
    b.SetMaxReceiveMessageSize(kMaxMessageBytes);
    b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, millis(options_.frontend_keepalive_time));
    b.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                         millis(options_.tls_handshake_timeout));
    b.RegisterService(proxy_service_.get());
    auto cq = b.AddCompletionQueue();
    if (!options_.uds_name.empty()) {
      add_unix_frontend(b);
      frontend_server_ = build_with_umask(b);
      if (!frontend_server_) {
        throw std::runtime_error("cannot serve the frontend on unix socket " + options_.uds_name);
      }
      KONN_LOG(log_, info, "frontend (grpc) listening on unix:{}", options_.uds_name);
    } else {
      auto creds = core::tls::grpc_server_credentials(options_.server_cert, options_.server_key,
                                                      options_.server_ca_cert, reload_seconds());
      b.AddListeningPort(bind_spec(options_.server_bind_address, options_.server_port), creds,
                         &frontend_port_);
      frontend_server_ = b.BuildAndStart();
      if (!frontend_server_ || frontend_port_ == 0) {
        throw std::runtime_error("cannot serve the frontend on " +
                                 bind_spec(options_.server_bind_address, options_.server_port));
      }
      KONN_LOG(log_, info, "frontend (grpc, mTLS) listening on {}",
               bind_spec(options_.server_bind_address, frontend_port_));
    }
    // Only the arrival of calls: their operations complete on the agent streams' queue.
    frontend_driver_ =
        std::make_unique<core::tunnel::CompletionDriver>("frontend-calls", std::move(cq));
  }
  // Agents: always TLS; mTLS when --cluster-ca-cert is given.
  {
    grpc::ServerBuilder b;
    b.SetMaxReceiveMessageSize(kMaxMessageBytes);
    b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, millis(options_.keepalive_time));
    b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    // A connection that does not finish its TLS handshake in time is dropped (gRPC's default
    // waits 120 s); counted nowhere, gRPC core does it.
    b.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                         millis(options_.tls_handshake_timeout));
    // Accept agent pings every 30 s or slower, as upstream's enforcement policy does.
    b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 30000);
    b.RegisterService(agent_service_.get());
    if (shared) {
      b.RegisterService(proxy_service_.get());
      add_unix_frontend(b);
    }
    auto cq = b.AddCompletionQueue();
    auto creds = core::tls::grpc_server_credentials(options_.cluster_cert, options_.cluster_key,
                                                    options_.cluster_ca_cert, reload_seconds());
    b.AddListeningPort(bind_spec(options_.agent_bind_address, options_.agent_port), creds,
                       &agent_port_);
    agent_server_ = shared ? build_with_umask(b) : b.BuildAndStart();
    if (!agent_server_ || agent_port_ == 0) {
      throw std::runtime_error(
          "cannot listen for agents on " +
          bind_spec(options_.agent_bind_address, options_.agent_port) +
          (shared ? " or serve the frontend on unix socket " + options_.uds_name : ""));
    }
    agent_driver_ = std::make_unique<core::tunnel::CompletionDriver>("grpc-streams", std::move(cq));
    agent_service_->accept(*agent_driver_, shared);
    if (frontend_driver_) proxy_service_->accept(*frontend_driver_, agent_driver_->cq(), false);
    if (shared) {
      proxy_service_->accept(*agent_driver_, agent_driver_->cq(), true);
      KONN_LOG(log_, info, "frontend (grpc) listening on unix:{} (served with the agents)",
               options_.uds_name);
    }
    KONN_LOG(log_, info, "agent listener (grpc, {}) on {}",
             options_.cluster_ca_cert.empty() ? "TLS" : "mTLS",
             bind_spec(options_.agent_bind_address, agent_port_));
  }
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
  leases_ = std::make_unique<LeaseController>(core::kube::api_target_from(rest),
                                              std::move(settings), metrics_);
  KONN_LOG(log_, info, "lease controller: apiserver {} ({})", rest.server, rest.source);
  leases_->start();
}

void ServerApp::start_token_review() {
  auto rest = core::kube::load_daemon_rest_config(options_.kubeconfig);
  reviewer_ = std::make_unique<TokenReviewer>(
      core::kube::api_target_from(rest), options_.authentication_audience, options_.agent_namespace,
      options_.agent_service_account, timers_.get_executor(),
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.authentication_timeout));
  router_->set_reviewer(reviewer_.get());
  KONN_LOG(log_, info,
           "agents authenticate with service-account tokens: TokenReview at {} ({}), audience {}, "
           "account system:serviceaccount:{}:{}",
           rest.server, rest.source, options_.authentication_audience, options_.agent_namespace,
           options_.agent_service_account);
}

unsigned ServerApp::reload_seconds() const {
  return static_cast<unsigned>(
      std::chrono::duration_cast<std::chrono::seconds>(options_.cert_reload_interval).count());
}

void ServerApp::start_http_connect() {
  pool_ = std::make_unique<core::io::WorkerPool>();
  http_connect_ = std::make_unique<HttpConnectServer>(*router_, *pool_);
  if (!options_.uds_name.empty()) {
    http_connect_->listen_unix(options_.uds_name, options_.delete_existing_uds_file);
    KONN_LOG(log_, info, "frontend (http-connect) listening on unix:{}", options_.uds_name);
  } else {
    core::tls::ServerTlsConfig tls;
    tls.cert_file = options_.server_cert;
    tls.key_file = options_.server_key;
    tls.client_ca_file = options_.server_ca_cert;
    tls.alpn = {"http/1.1"};
    http_connect_->listen_tls(options_.server_bind_address, options_.server_port, tls,
                              options_.cert_reload_interval, options_.openssl_ciphers());
    frontend_port_ = http_connect_->port();
    KONN_LOG(log_, info, "frontend (http-connect, mTLS) listening on {}",
             bind_spec(options_.server_bind_address, frontend_port_));
  }
  pool_->start();
}

void ServerApp::start_admin() {
  auto metrics = [this](const std::string&) {
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
  admin_->start();
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
  return metrics_.grpc_proxy.Value() + metrics_.http_connections.Add({}).Value();
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
  // grpc::Server::Shutdown stops listening and refuses new calls at once, lets open calls run
  // until the deadline, then cancels them; it blocks meanwhile, hence a thread each. The watch
  // below decides when to end (no tunnel left, or the graceful timeout) and cancels the calls
  // itself; gRPC's own deadline is only a backstop.
  auto deadline = std::chrono::system_clock::now() +
                  std::chrono::duration_cast<std::chrono::system_clock::duration>(grace) +
                  std::chrono::seconds(10);
  if (frontend_server_) {
    frontend_stopper_ = std::thread([this, deadline] {
      frontend_server_->Shutdown(deadline);
      frontend_stopped_ = true;
    });
  }
  if (http_connect_) http_connect_->stop();
  if (agent_server_) {
    agent_stopper_ = std::thread([this, deadline] {
      agent_server_->Shutdown(deadline);
      agent_stopped_ = true;
    });
  }
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
  auto now = std::chrono::system_clock::now();
  // After a drain: cancel what is left (tunnels past the graceful timeout; agent streams, which
  // never end by themselves), again until Shutdown returned, should a call have slipped in
  // before Shutdown began refusing them.
  auto finish = [](grpc::Server* server, std::thread& stopper, std::atomic<bool>& stopped) {
    while (!stopped) {
      grpc_server_cancel_all_calls(server->c_server());
      std::this_thread::sleep_for(kDrainPoll);
    }
    stopper.join();
  };
  if (frontend_stopper_.joinable()) {
    finish(frontend_server_.get(), frontend_stopper_, frontend_stopped_);
  } else if (frontend_server_) {
    frontend_server_->Shutdown(now);
  }
  if (http_connect_) http_connect_->stop();
  if (agent_stopper_.joinable()) {
    finish(agent_server_.get(), agent_stopper_, agent_stopped_);
  } else if (agent_server_) {
    agent_server_->Shutdown(now);
  }
  // Between the servers' shutdown, which cancelled every call, and their destruction: each
  // queue still holds the last request for a call, whose completion reads its server, and each
  // cancelled call (Backend, GrpcFrontend, both with operations on the agent streams' queue) has
  // yet to issue its finish operation.
  if (agent_driver_ || frontend_driver_) {
    bool frontends_done = proxy_service_->wait_calls_done(kAgentCallsWait);
    bool agents_done = agent_service_->wait_calls_done(kAgentCallsWait);
    if (frontends_done && agents_done) {
      frontend_driver_.reset();
      agent_driver_.reset();
    } else {
      // Shutting a queue down now would abort the process: leave the queues and their servers
      // to the process's exit.
      KONN_LOG(log_, warn, "{} streams did not finish within {} ms; exiting without them",
               frontends_done ? "agent" : "frontend", kAgentCallsWait.count());
      (void)frontend_driver_.release();
      (void)agent_driver_.release();
      (void)frontend_server_.release();
      (void)agent_server_.release();
    }
  }
  drain_watch_.reset();
  frontend_server_.reset();
  agent_server_.reset();
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
