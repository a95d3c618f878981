#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <asio/any_io_executor.hpp>
#include <asio/ssl/context.hpp>

#include "core/tls/tls_context.h"

namespace konn::core::tls {

// A server TLS context built from certificate, key and CA files, and built again when they
// change (--cert-reload-interval): every `interval` the files' modification times and sizes are
// compared with the last ones loaded; on a difference the context is rebuilt and handed to
// `on_change`, so new handshakes use it while open connections keep theirs. Files that cannot be
// loaded (half written) keep the old context, and the next check tries again. Replace the files
// atomically (rename, or a symlinked directory as Kubernetes mounts Secrets).
//
// Contexts are TLS 1.2 or newer (config.min_version may raise the floor to 1.3), with `ciphers`
// (OpenSSL's TLS 1.2 list; empty: its default).
class ReloadingServerContext {
 public:
  using OnChange = std::function<void(std::shared_ptr<asio::ssl::context>)>;

  // Builds the first context; throws std::runtime_error naming the file or the cipher list that
  // failed. `what` names the listener in log lines ("frontend", "agent"). The checks run on `ex`
  // (0 interval: none), as does `on_change`.
  ReloadingServerContext(asio::any_io_executor ex, ServerTlsConfig config, std::string ciphers,
                         std::chrono::nanoseconds interval, std::string what,
                         OnChange on_change = {});
  ~ReloadingServerContext();  // stops the checks
  ReloadingServerContext(const ReloadingServerContext&) = delete;
  ReloadingServerContext& operator=(const ReloadingServerContext&) = delete;

  // The context loaded last. Thread-safe.
  std::shared_ptr<asio::ssl::context> current() const;

  // Builds one context from `config` (no watching).
  static std::shared_ptr<asio::ssl::context> build(const ServerTlsConfig& config,
                                                   const std::string& ciphers);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace konn::core::tls
