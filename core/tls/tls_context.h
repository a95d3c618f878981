#pragma once

#include <memory>
#include <string>
#include <vector>

#include <asio/ssl/context.hpp>

namespace konn::core::tls {

// Client side of a TLS connection (to an apiserver, a proxy, ...). Every PEM field holds PEM text,
// not a path: callers load files themselves so their errors can name the config field.
struct ClientTlsConfig {
  std::string ca_pem;                // trusted roots; empty = the system's default roots
  bool insecure_skip_verify = false;  // no chain or name check (kubeconfig insecure-skip-tls-verify)
  std::string cert_pem;              // client certificate chain (optional)
  std::string key_pem;               // its private key
  std::vector<std::string> alpn;     // protocols offered, e.g. {"http/1.1"}
};

// Builds a TLS 1.2+ client context. Throws std::runtime_error naming what could not be loaded.
std::shared_ptr<asio::ssl::context> make_client_context(const ClientTlsConfig& config);

// Prepares one client connection before its handshake: sets SNI to `server_name` (unless it is an
// IP literal, which SNI does not allow) and, when `verify`, makes the handshake check the peer
// certificate against that DNS name or IP address. Returns false if OpenSSL refused the name.
bool prepare_client(SSL* ssl, const std::string& server_name, bool verify);

// Server side: certificate chain and key from files; with `client_ca_file`, clients must present a
// certificate signed by it (mutual TLS).
struct ServerTlsConfig {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;        // empty = no client certificate requested
  std::vector<std::string> alpn;     // protocols accepted, in preference order
  // The lowest protocol version accepted (OpenSSL's TLS1_2_VERSION or TLS1_3_VERSION; anything
  // lower is raised to TLS 1.2: konn never negotiates below it). 0: TLS 1.2.
  int min_version = 0;
};

// Builds a TLS 1.2+ server context (TLS 1.3+ with min_version = TLS1_3_VERSION). Throws
// std::runtime_error naming the file that failed.
std::shared_ptr<asio::ssl::context> make_server_context(const ServerTlsConfig& config);

}  // namespace konn::core::tls
