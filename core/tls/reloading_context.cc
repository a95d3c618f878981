#include "core/tls/reloading_context.h"

#include <filesystem>
#include <mutex>
#include <stdexcept>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <openssl/ssl.h>

#include "core/log/log_macros.h"

namespace konn::core::tls {
namespace {

// What the files look like now: path, modification time and size of each.
std::string files_stamp(const ServerTlsConfig& c) {
  std::string stamp;
  for (const auto* path : {&c.cert_file, &c.key_file, &c.client_ca_file}) {
    if (path->empty()) continue;
    std::error_code ec;
    auto t = std::filesystem::last_write_time(*path, ec);
    auto size = std::filesystem::file_size(*path, ec);
    stamp += *path + ":" + std::to_string(t.time_since_epoch().count()) + ":" +
             std::to_string(size) + ";";
  }
  return stamp;
}

}  // namespace

struct ReloadingServerContext::State : std::enable_shared_from_this<State> {
  State(asio::any_io_executor ex, ServerTlsConfig c, std::string cipher_list,
        std::chrono::nanoseconds every, std::string name, OnChange changed)
      : config(std::move(c)),
        ciphers(std::move(cipher_list)),
        interval(every),
        what(std::move(name)),
        on_change(std::move(changed)),
        timer(std::move(ex)) {}

  void watch() {
    timer.expires_after(interval);
    timer.async_wait([weak = weak_from_this()](std::error_code ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      self->check();
      self->watch();
    });
  }

  void check() {
    auto now = files_stamp(config);
    if (now == stamp) return;
    std::shared_ptr<asio::ssl::context> ctx;
    try {
      ctx = build(config, ciphers);
    } catch (const std::exception& e) {
      KONN_LOG(core::log::get("tls"), warn,
               "{} TLS files changed but could not be loaded ({}); keeping the old ones", what,
               e.what());
      return;
    }
    stamp = std::move(now);
    {
      std::lock_guard lock(mu);
      current = ctx;
    }
    KONN_LOG(core::log::get("tls"), info,
             "{} TLS certificate files changed: new connections use them", what);
    if (on_change) on_change(std::move(ctx));
  }

  const ServerTlsConfig config;
  const std::string ciphers;
  const std::chrono::nanoseconds interval;
  const std::string what;
  const OnChange on_change;
  asio::steady_timer timer;
  std::string stamp;  // the timer's thread only
  mutable std::mutex mu;
  std::shared_ptr<asio::ssl::context> current;
};

ReloadingServerContext::ReloadingServerContext(asio::any_io_executor ex, ServerTlsConfig config,
                                               std::string ciphers,
                                               std::chrono::nanoseconds interval, std::string what,
                                               OnChange on_change)
    : state_(std::make_shared<State>(std::move(ex), std::move(config), std::move(ciphers),
                                     interval, std::move(what), std::move(on_change))) {
  state_->stamp = files_stamp(state_->config);
  state_->current = build(state_->config, state_->ciphers);
  if (interval.count() > 0) {
    // The first wait is armed on the timer's own executor: the timer is not thread-safe.
    asio::post(state_->timer.get_executor(), [weak = std::weak_ptr<State>(state_)] {
      if (auto self = weak.lock()) self->watch();
    });
  }
}

ReloadingServerContext::~ReloadingServerContext() {
  // The pending check holds only a weak reference: it finds nothing once this is gone. The
  // timer is cancelled on its own executor (it is not thread-safe).
  asio::post(state_->timer.get_executor(), [state = state_] { state->timer.cancel(); });
}

std::shared_ptr<asio::ssl::context> ReloadingServerContext::current() const {
  std::lock_guard lock(state_->mu);
  return state_->current;
}

std::shared_ptr<asio::ssl::context> ReloadingServerContext::build(const ServerTlsConfig& config,
                                                                  const std::string& ciphers) {
  auto ctx = make_server_context(config);  // TLS 1.2 or config.min_version, whichever is higher
  if (!ciphers.empty() && SSL_CTX_set_cipher_list(ctx->native_handle(), ciphers.c_str()) != 1) {
    throw std::runtime_error("cipher suites not accepted by OpenSSL: " + ciphers);
  }
  return ctx;
}

}  // namespace konn::core::tls
