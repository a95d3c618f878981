#include "core/tls/grpc_credentials.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace konn::core::tls {

std::string read_pem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string pem = ss.str();
  if (pem.find("-----BEGIN") == std::string::npos) {
    throw std::runtime_error(path + " holds no PEM block");
  }
  return pem;
}

std::shared_ptr<grpc::ServerCredentials> grpc_server_credentials(
    const std::string& cert_path, const std::string& key_path, const std::string& client_ca_path) {
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

}  // namespace konn::core::tls
