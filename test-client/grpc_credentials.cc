#include "test-client/grpc_credentials.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "core/tls/pem.h"
#include "core/tls/tls_context.h"

namespace konn::testclient {

using core::tls::read_pem;

std::shared_ptr<grpc::ServerCredentials> grpc_server_credentials(
    const std::string& cert_path, const std::string& key_path, const std::string& client_ca_path,
    unsigned reload_interval_sec) {
  if (reload_interval_sec > 0) {
    // Fail at startup, not at the first handshake, when a file is missing or empty.
    read_pem(cert_path);
    read_pem(key_path);
    if (!client_ca_path.empty()) read_pem(client_ca_path);
    auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        key_path, cert_path, client_ca_path, reload_interval_sec);
    grpc::experimental::TlsServerCredentialsOptions opts(provider);
    opts.watch_identity_key_cert_pairs();
    if (!client_ca_path.empty()) {
      opts.watch_root_certs();
      opts.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    } else {
      opts.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    }
    return grpc::experimental::TlsServerCredentials(opts);
  }
  grpc::SslServerCredentialsOptions opts(
      client_ca_path.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                             : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!client_ca_path.empty()) opts.pem_root_certs = read_pem(client_ca_path);
  opts.pem_key_cert_pairs.push_back({read_pem(key_path), read_pem(cert_path)});
  return grpc::SslServerCredentials(opts);
}

std::shared_ptr<grpc::ChannelCredentials> grpc_channel_credentials(const std::string& ca_path,
                                                                   const std::string& cert_path,
                                                                   const std::string& key_path) {
  grpc::SslCredentialsOptions opts;
  if (!ca_path.empty()) opts.pem_root_certs = read_pem(ca_path);
  if (!cert_path.empty() && !key_path.empty()) {
    opts.pem_cert_chain = read_pem(cert_path);
    opts.pem_private_key = read_pem(key_path);
  }
  return grpc::SslCredentials(opts);
}

}  // namespace konn::testclient
