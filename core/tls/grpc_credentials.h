#pragma once

#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

namespace konn::core::tls {

// Reads a whole PEM file. Throws std::runtime_error naming the path when it cannot.
std::string read_pem(const std::string& path);

// TLS server credentials for a gRPC listener from PEM files. With a non-empty `client_ca_path`
// clients must present a certificate signed by it (mTLS); otherwise client certificates are not
// requested. gRPC negotiates ALPN "h2", which Go peers require. Throws on unreadable files.
std::shared_ptr<grpc::ServerCredentials> grpc_server_credentials(const std::string& cert_path,
                                                                 const std::string& key_path,
                                                                 const std::string& client_ca_path);

// TLS channel credentials: trust `ca_path` (system roots when empty) and, when both are given,
// present `cert_path`/`key_path` as the client certificate.
std::shared_ptr<grpc::ChannelCredentials> grpc_channel_credentials(const std::string& ca_path,
                                                                   const std::string& cert_path,
                                                                   const std::string& key_path);

}  // namespace konn::core::tls
