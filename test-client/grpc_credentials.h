#pragma once

#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

// gRPC C++ TLS credentials from PEM files, for the tests' and tools' gRPC C++ peers (the daemons
// speak gRPC on core/h2 with core/tls's OpenSSL contexts).
namespace konn::testclient {

// TLS server credentials for a gRPC listener from PEM files. With a non-empty `client_ca_path`
// clients must present a certificate signed by it (mTLS); otherwise client certificates are not
// requested. gRPC negotiates ALPN "h2", which Go peers require. Throws on unreadable files.
//
// With `reload_interval_sec` > 0 the files are watched and re-read at that interval: new
// handshakes present the new certificate (and trust the new CA) while established connections
// keep running. Replace the files atomically (rename, or a symlinked directory as Kubernetes
// mounts Secrets), since key and certificate must match when read.
std::shared_ptr<grpc::ServerCredentials> grpc_server_credentials(const std::string& cert_path,
                                                                 const std::string& key_path,
                                                                 const std::string& client_ca_path,
                                                                 unsigned reload_interval_sec = 0);

// TLS channel credentials: trust `ca_path` (system roots when empty) and, when both are given,
// present `cert_path`/`key_path` as the client certificate.
std::shared_ptr<grpc::ChannelCredentials> grpc_channel_credentials(const std::string& ca_path,
                                                                   const std::string& cert_path,
                                                                   const std::string& key_path);

}  // namespace konn::testclient
