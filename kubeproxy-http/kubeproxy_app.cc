#include "kubeproxy-http/kubeproxy_app.h"

#include <atomic>
#include <cstdio>
#include <iostream>
#include <sys/stat.h>
#include <variant>

#include <asio/ssl.hpp>

#include "core/admin/admin_server.h"
#include "core/admin/certificate_gauges.h"
#include "core/admin/status_page.h"
#include "core/io/allocator.h"
#include "core/io/shutdown.h"
#include "core/io/worker_pool.h"
#include "core/konnectivity/dialer.h"
#include "core/log/log_macros.h"
#include "core/net/dialer.h"
#include "core/net/endpoint.h"
#include "core/net/listener.h"
#include "core/tls/tls_context.h"
#include "kubeproxy-http/connect_proxy.h"
#include "kubeproxy-http/forwarder.h"
#include "kubeproxy-http/kubeproxy_status.h"

namespace konn::kubeproxy {

struct KubeproxyApp::Impl {
  const KubeproxyOptions& options;
  std::optional<RestConfig> rest;
  // Open connections and recent failures, for /status.json. Before the pool: a session frame
  // destroyed with the pool unlists its connection here.
  ConnectionTracker tracker;
  core::io::WorkerPool pool;
  asio::io_context main_ctx;
  KubeproxyMetrics metrics;
  // konn_certificate_expiry_timestamp_seconds of the certificate files, read at each scrape.
  core::admin::CertificateGauges certificates{metrics.registry()};
  std::unique_ptr<KubeproxyStatus> status;
  std::unique_ptr<core::konnectivity::Dialer> konnectivity;
  std::unique_ptr<Forwarder> forwarder;
  std::unique_ptr<ConnectProxy> connect;
  std::unique_ptr<core::admin::AdminServer> health;
  std::atomic<bool> serving{false};
  std::shared_ptr<asio::ssl::context> listener_tls;
  std::shared_ptr<spdlog::logger> log = core::log::get("kubeproxy");

  Impl(const KubeproxyOptions& o, const KubeconfigEnvironment& env)
      : options(o), pool(static_cast<unsigned>(o.workers)) {
    if (o.mode == "proxy") {
      rest = load_rest_config(o.kube, env);
      std::vector<asio::execution_context*> contexts;
      for (size_t i = 0; i < pool.size(); ++i) contexts.push_back(&pool.at(i));
      forwarder = std::make_unique<Forwarder>(o, *rest, contexts);
      forwarder->set_metrics(&metrics);
      forwarder->set_tracker(&tracker);
    } else {
      if (o.konnectivity.enabled()) {
        konnectivity = std::make_unique<core::konnectivity::Dialer>(o.konnectivity);
      }
      connect = std::make_unique<ConnectProxy>(o, konnectivity.get(), &metrics);
      connect->set_tracker(&tracker);
    }
    status = std::make_unique<KubeproxyStatus>(o, tracker, certificates,
                                               rest ? apiserver_address(*rest) : std::string());
    if (!o.tls_cert_file.empty()) {
      core::tls::ServerTlsConfig c;
      c.cert_file = o.tls_cert_file;
      c.key_file = o.tls_key_file;
      c.client_ca_file = o.client_ca_file;
      c.alpn = {"http/1.1"};
      listener_tls = core::tls::make_server_context(c);
    }
  }

  // Completion of a session coroutine: an exception there is a bug; log it rather than lose it.
  auto log_failure() {
    return [l = log](const std::exception_ptr& e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        l->error("session ended by an exception: {}", ex.what());
      }
    };
  }

  // Runs one accepted connection on its own io_context.
  template <typename Socket>
  void start_session(Socket sock, std::string peer, core::io::DescriptorReserve::Lease lease) {
    auto ex = sock.get_executor();
    if (listener_tls) {
      if constexpr (std::is_same_v<typename Socket::protocol_type, asio::ip::tcp>) {
        asio::co_spawn(ex,
                       core::io::run_leased(
                           tls_session(asio::ip::tcp::socket(std::move(sock)), std::move(peer)),
                           std::move(lease)),
                       log_failure());
      }
      return;
    }
    asio::co_spawn(ex,
                   core::io::run_leased(session(ByteStream(std::move(sock)), std::move(peer)),
                                        std::move(lease)),
                   log_failure());
  }

  core::io::Awaitable<void> tls_session(asio::ip::tcp::socket sock, std::string peer) {
    using namespace asio::experimental::awaitable_operators;
    auto tls = std::make_unique<ByteStream::Tls>(std::move(sock), *listener_tls);
    asio::steady_timer timer(tls->get_executor(), options.request_header_timeout.count() > 0
                                                      ? options.request_header_timeout
                                                      : std::chrono::hours(1));
    auto r =
        co_await (tls->async_handshake(asio::ssl::stream_base::server, core::io::use_nothrow) ||
                  timer.async_wait(core::io::use_nothrow));
    if (r.index() == 1 || std::get<0>(std::get<0>(r))) {
      KONN_LOG(log, debug, "{}: TLS handshake failed", peer);
      co_return;
    }
    co_await session(ByteStream(std::move(tls)), std::move(peer));
  }

  core::io::Awaitable<void> session(ByteStream s, std::string peer) {
    metrics.connection_opened();
    auto live = tracker.open(peer);
    if (forwarder) {
      co_await forwarder->serve(std::move(s), std::move(peer), live.get());
    } else {
      co_await connect->serve(std::move(s), std::move(peer), live.get());
    }
    live.reset();
    metrics.connection_closed();
  }

  void start_health() {
    const int port = options.effective_health_port();
    if (port < 0) return;
    auto ok = [](const std::string&) { return core::admin::Response{200, "text/plain", "ok", {}}; };
    certificates.add("listener", "serving", options.tls_cert_file);
    certificates.add("listener", "ca", options.client_ca_file);
    certificates.add("apiserver", "client", options.kube.client_certificate);
    certificates.add("apiserver", "ca", options.kube.certificate_authority);
    certificates.add("konnectivity", "client", options.konnectivity.client_cert);
    certificates.add("konnectivity", "ca", options.konnectivity.ca_cert);
    auto scrape = [this](const std::string&) {
      certificates.refresh();
      return core::admin::Response{
          200, "text/plain; version=0.0.4; charset=utf-8", metrics.registry().serialize(), {}};
    };
    auto ready = [this](const std::string& query) {
      std::vector<core::admin::Check> checks{{"listening", [this]() -> std::optional<std::string> {
                                                if (serving.load()) return std::nullopt;
                                                return "not serving (starting or shutting down)";
                                              }}};
      if (konnectivity) {
        checks.push_back({"konnectivity", [this]() -> std::optional<std::string> {
                            return konnectivity->probe(std::chrono::seconds(1));
                          }});
      }
      return core::admin::readiness(checks, query.find("verbose") != std::string::npos);
    };
    health = std::make_unique<core::admin::AdminServer>(
        "health", options.effective_health_bind_address(), static_cast<uint16_t>(port));
    health->route("/healthz", ok);
    health->route("/livez", ok);
    health->route("/readyz", ready);
    health->route("/metrics", scrape);
    // What the daemon is doing, on the health listener: only when it listens on loopback (the
    // proxy mode's default), or with --status-page-off-loopback (else 403).
    core::admin::route_status(*health, "kubeproxy-http", options.effective_health_bind_address(),
                              options.status_page_off_loopback, "--status-page-off-loopback",
                              [this](const std::string& query) { return status->build(query); });
    if (!health->start_unless_default_taken(options.health_port_set)) health.reset();
  }

  template <typename Acceptor>
  core::io::Awaitable<void> accept_loop(Acceptor& acceptor) {
    for (;;) {
      // The lease (client and upstream sockets) is taken before the accept: the accepted socket
      // registers on place.ctx at once.
      auto place = pool.place(2);
      auto [ec, sock] = co_await acceptor.async_accept(place.ctx, core::io::use_nothrow);
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
        KONN_LOG(log, warn, "accept: {}", ec.message());
        continue;
      }
      std::string peer = "unix";
      if constexpr (std::is_same_v<typename decltype(sock)::protocol_type, asio::ip::tcp>) {
        std::error_code pec;
        auto ep = sock.remote_endpoint(pec);
        if (!pec) {
          peer = core::net::HostPort{ep.address().to_string(), ep.port()}.to_string();
        }
        std::error_code ignored;
        sock.set_option(asio::ip::tcp::no_delay(true), ignored);
      }
      start_session(std::move(sock), std::move(peer), std::move(place.lease));
    }
  }
};

KubeproxyApp::KubeproxyApp(const KubeproxyOptions& options, const KubeconfigEnvironment& env)
    : impl_(std::make_unique<Impl>(options, env)) {}

KubeproxyApp::~KubeproxyApp() = default;

int KubeproxyApp::run() {
  auto& im = *impl_;
  const auto& o = im.options;
  if (im.rest) {
    im.log->info("forwarding to {} ({})", im.rest->server, im.rest->source);
  }
  if (o.disable_filter && o.unix_socket.empty()) {
    im.log->warn(
        "Request filter disabled, your proxy is vulnerable to XSRF attacks, please be "
        "cautious");
  }
  std::variant<std::monostate, asio::ip::tcp::acceptor, asio::local::stream_protocol::acceptor>
      acceptor;
  std::string bound;
  if (!o.unix_socket.empty()) {
    // kubectl creates the socket with umask 077.
    auto& a = acceptor.emplace<asio::local::stream_protocol::acceptor>(
        core::net::listen_unix(im.main_ctx, o.unix_socket, true, 0700));
    bound = o.unix_socket;
    asio::co_spawn(im.main_ctx, im.accept_loop(a), asio::detached);
  } else {
    auto& a = acceptor.emplace<asio::ip::tcp::acceptor>(
        core::net::listen_tcp(im.main_ctx, o.address, static_cast<uint16_t>(o.port)));
    auto ep = a.local_endpoint();
    bound = core::net::HostPort{ep.address().to_string(), ep.port()}.to_string();
    asio::co_spawn(im.main_ctx, im.accept_loop(a), asio::detached);
  }
  std::cout << "Starting to serve on " << bound << std::endl;
  if (im.konnectivity) {
    im.log->info("CONNECT goes through the Konnectivity proxy-server: {}",
                 o.konnectivity.describe());
  }
  im.start_health();
  im.serving = true;
  im.pool.start();

  auto stop_all = [&im, &acceptor](int) {
    im.serving = false;
    std::visit(
        [](auto& a) {
          if constexpr (!std::is_same_v<std::decay_t<decltype(a)>, std::monostate>) {
            std::error_code ignored;
            a.close(ignored);
          }
        },
        acceptor);
    // Streams (watches, exec sessions) may last forever: stop the workers rather than drain.
    for (size_t i = 0; i < im.pool.size(); ++i) im.pool.at(i).stop();
    im.main_ctx.stop();
  };
  core::io::ShutdownSignals signals(im.main_ctx, stop_all, stop_all);
  core::io::start_memory_trimmer(im.main_ctx);
  im.main_ctx.run();
  im.pool.stop();
  if (im.health) im.health->stop();
  if (!o.unix_socket.empty()) std::remove(o.unix_socket.c_str());
  return 0;
}

}  // namespace konn::kubeproxy
