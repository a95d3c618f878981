#include "proxy-server/frontend/http_connect_frontend.h"

#include <sys/stat.h>

#include <asio.hpp>
#include <asio/ssl.hpp>

#include "core/log/log_macros.h"
#include "core/net/dialer.h"
#include "core/net/listener.h"
#include "proxy-server/frontend/connect_session.h"

namespace konn::server {
namespace {

// Out of descriptors, most likely: the acceptor tries again a little later.
void log_accept_error(const std::error_code& ec) {
  KONN_LOG(http_connect::connect_logger(), warn, "http-connect frontend: accept: {}", ec.message());
}

}  // namespace

HttpConnectServer::HttpConnectServer(Router& router, core::io::WorkerPool& pool,
                                     std::function<core::io::WorkerPool::Placement()> place)
    : router_(router), place_(std::move(place)), accept_ctx_(pool.at(0)) {}

HttpConnectServer::~HttpConnectServer() { stop(); }

void HttpConnectServer::reconsider_placement() {
  if (unix_acceptor_) unix_acceptor_->reconsider();
  if (tcp_acceptor_) tcp_acceptor_->reconsider();
}

void HttpConnectServer::listen_unix(const std::string& path, bool delete_existing) {
  unix_acceptor_ = std::make_shared<core::net::PlacedAcceptor<asio::local::stream_protocol>>(
      accept_ctx_, core::net::listen_unix(accept_ctx_, path, delete_existing, 0770),
      /*follow=*/true, place_,
      [this](asio::local::stream_protocol::socket s, core::io::WorkerPool::Placement place) {
        std::make_shared<http_connect::ConnectSession<asio::local::stream_protocol::socket>>(
            std::move(s), router_, "unix", std::move(place.lease))
            ->start();
      },
      log_accept_error);
  unix_acceptor_->start();
}

void HttpConnectServer::listen_tls(const std::string& address, int port,
                                   core::tls::ServerTlsConfig tls, std::chrono::nanoseconds reload,
                                   std::string ciphers, std::function<void()> on_reload) {
  // Checks and replacements run on accept_ctx_; the acceptor's worker reads the current one.
  tls_files_ = std::make_unique<core::tls::ReloadingServerContext>(
      accept_ctx_.get_executor(), std::move(tls), std::move(ciphers), reload, "frontend",
      [this, on_reload = std::move(on_reload)](std::shared_ptr<asio::ssl::context> ctx) {
        {
          std::lock_guard lock(tls_mu_);
          tls_ = std::move(ctx);
        }
        if (on_reload) on_reload();
      });
  {
    std::lock_guard lock(tls_mu_);
    tls_ = tls_files_->current();
  }
  auto listening = core::net::listen_tcp(accept_ctx_, address, static_cast<uint16_t>(port));
  port_ = listening.local_endpoint().port();
  tcp_acceptor_ = std::make_shared<core::net::PlacedAcceptor<asio::ip::tcp>>(
      accept_ctx_, std::move(listening), /*follow=*/true, place_,
      [this](asio::ip::tcp::socket s, core::io::WorkerPool::Placement place) {
        core::net::set_nodelay(s);
        std::error_code pec;
        auto ep = s.remote_endpoint(pec);
        std::string peer = pec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
        std::make_shared<http_connect::ConnectSession<asio::ssl::stream<asio::ip::tcp::socket>>>(
            asio::ssl::stream<asio::ip::tcp::socket>(std::move(s), *current_tls()), router_, peer,
            std::move(place.lease))
            ->start();
      },
      log_accept_error);
  tcp_acceptor_->start();
}

void HttpConnectServer::stop() {
  if (unix_acceptor_) unix_acceptor_->stop();
  if (tcp_acceptor_) tcp_acceptor_->stop();
}

std::shared_ptr<asio::ssl::context> HttpConnectServer::current_tls() {
  std::lock_guard lock(tls_mu_);
  return tls_;
}

}  // namespace konn::server
