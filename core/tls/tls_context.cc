#include "core/tls/tls_context.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <asio/ip/address.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace konn::core::tls {
namespace {

std::string ssl_error_text(const std::system_error& e) {
  std::string msg = e.code().message();
  return msg.empty() ? e.what() : msg;
}

// ALPN wire format: length-prefixed protocol names.
std::string alpn_wire(const std::vector<std::string>& protos) {
  std::string out;
  for (const auto& p : protos) {
    out.push_back(static_cast<char>(p.size()));
    out.append(p);
  }
  return out;
}

int select_alpn(SSL* /*ssl*/, const unsigned char** out, unsigned char* outlen,
                const unsigned char* in, unsigned int inlen, void* arg) {
  const auto* wire = static_cast<const std::string*>(arg);
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen,
                            reinterpret_cast<const unsigned char*>(wire->data()),  // NOLINT
                            static_cast<unsigned int>(wire->size()), in,
                            inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

// The certificates sent after ours, chosen once. A certificate file that holds no chain makes
// OpenSSL build one from the trust store on every handshake, the root included: a twentieth of a
// server's CPU while its agents reconnect, and every peer then decodes a certificate it already
// trusts (in OpenSSL 3.0 the costliest step of a handshake). Built here once, as OpenSSL would
// (as far as the store reaches, trusted or not), without a self-signed root, which a peer must
// hold to trust anyway. A file with its own chain is sent as it is.
void settle_chain(SSL_CTX* ctx) {
  STACK_OF(X509)* own = nullptr;
  if (SSL_CTX_get0_chain_certs(ctx, &own) == 1 && own != nullptr && sk_X509_num(own) > 0) return;
  X509* leaf = SSL_CTX_get0_certificate(ctx);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  if (leaf == nullptr || store == nullptr) return;
  STACK_OF(X509)* chain = nullptr;
  X509_STORE_CTX* build = X509_STORE_CTX_new();
  if (build != nullptr && X509_STORE_CTX_init(build, store, leaf, nullptr) == 1) {
    // A chain that reaches no trusted root still goes as far as the store reaches.
    (void)X509_verify_cert(build);
    chain = X509_STORE_CTX_get1_chain(build);
  }
  X509_STORE_CTX_free(build);
  ERR_clear_error();
  if (chain == nullptr) return;  // OpenSSL keeps building it per handshake, as before
  X509_free(sk_X509_shift(chain));  // the leaf is sent on its own
  const int n = sk_X509_num(chain);
  if (n > 0 && X509_self_signed(sk_X509_value(chain, n - 1), 0) == 1) X509_free(sk_X509_pop(chain));
  // Even empty, a chain set here stops the per-handshake search.
  if (SSL_CTX_set0_chain(ctx, chain) != 1) sk_X509_pop_free(chain, X509_free);
}

}  // namespace

std::shared_ptr<asio::ssl::context> make_client_context(const ClientTlsConfig& config) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                   asio::ssl::context::no_tlsv1_1);
  try {
    if (config.insecure_skip_verify) {
      ctx->set_verify_mode(asio::ssl::verify_none);
    } else {
      ctx->set_verify_mode(asio::ssl::verify_peer);
      if (config.ca_pem.empty()) {
        ctx->set_default_verify_paths();
      } else {
        ctx->add_certificate_authority(asio::buffer(config.ca_pem));
      }
    }
  } catch (const std::system_error& e) {
    throw std::runtime_error("certificate authority: " + ssl_error_text(e));
  }
  if (!config.cert_pem.empty() || !config.key_pem.empty()) {
    try {
      ctx->use_certificate_chain(asio::buffer(config.cert_pem));
    } catch (const std::system_error& e) {
      throw std::runtime_error("client certificate: " + ssl_error_text(e));
    }
    try {
      ctx->use_private_key(asio::buffer(config.key_pem), asio::ssl::context::pem);
    } catch (const std::system_error& e) {
      throw std::runtime_error("client key: " + ssl_error_text(e));
    }
    if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
      throw std::runtime_error("client key does not match the client certificate");
    }
    settle_chain(ctx->native_handle());
  }
  if (!config.alpn.empty()) {
    std::string wire = alpn_wire(config.alpn);
    SSL_CTX_set_alpn_protos(ctx->native_handle(),
                            reinterpret_cast<const unsigned char*>(wire.data()),  // NOLINT
                            static_cast<unsigned int>(wire.size()));
  }
  return ctx;
}

bool prepare_client(SSL* ssl, const std::string& server_name, bool verify) {
  std::error_code ec;
  auto ip = asio::ip::make_address(server_name, ec);
  bool is_ip = !ec;
  if (!is_ip && !server_name.empty()) {
    // Exception: SSL_set_tlsext_host_name is a macro with a C cast; call the function it wraps.
    if (SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                 const_cast<char*>(server_name.c_str())) != 1) {
      return false;
    }
  }
  if (!verify) return true;
  if (is_ip) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    return X509_VERIFY_PARAM_set1_ip_asc(param, ip.to_string().c_str()) == 1;
  }
  return SSL_set1_host(ssl, server_name.c_str()) == 1;
}

std::shared_ptr<asio::ssl::context> make_server_context(const ServerTlsConfig& config) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                   asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), std::max(config.min_version, TLS1_2_VERSION));
  try {
    ctx->use_certificate_chain_file(config.cert_file);
  } catch (const std::system_error& e) {
    throw std::runtime_error("certificate " + config.cert_file + ": " + ssl_error_text(e));
  }
  try {
    ctx->use_private_key_file(config.key_file, asio::ssl::context::pem);
  } catch (const std::system_error& e) {
    throw std::runtime_error("private key " + config.key_file + ": " + ssl_error_text(e));
  }
  if (!config.client_ca_file.empty()) {
    try {
      ctx->load_verify_file(config.client_ca_file);
    } catch (const std::system_error& e) {
      throw std::runtime_error("client CA " + config.client_ca_file + ": " + ssl_error_text(e));
    }
    ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  }
  settle_chain(ctx->native_handle());
  if (!config.alpn.empty()) {
    // OpenSSL keeps only a pointer to the wire string, so it must live as long as the context.
    auto wire = std::make_shared<std::string>(alpn_wire(config.alpn));
    SSL_CTX_set_alpn_select_cb(ctx->native_handle(), &select_alpn, wire.get());
    // Tie the string's lifetime to the context's.
    return std::shared_ptr<asio::ssl::context>(ctx.get(), [ctx, wire](asio::ssl::context*) {});
  }
  return ctx;
}

}  // namespace konn::core::tls
