#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/channel.h>

namespace konn::testclient {

// Where the proxy-server frontend listens and how to authenticate to it.
struct ChannelConfig {
  // Unix socket path of the gRPC frontend (plaintext h2c, as kube-apiserver uses it). When set,
  // the TCP fields are ignored.
  std::string uds_path;
  // TCP frontend with mTLS.
  std::string host;
  int port = 0;
  std::string ca_cert;      // trust anchor for the server certificate (system roots when empty)
  std::string client_cert;  // client certificate and key presented to the server
  std::string client_key;
};

// A gRPC channel to the frontend. One channel is one HTTP/2 connection (a private subchannel
// pool, so two calls never share a connection by accident); any number of Tunnels may share it,
// as kube-apiserver shares one connection for all its dials. Messages of any size are accepted.
// Throws std::runtime_error on unreadable certificate files.
std::shared_ptr<grpc::Channel> make_channel(const ChannelConfig& config);

// Waits until the channel is connected; false at the deadline.
bool wait_connected(const std::shared_ptr<grpc::Channel>& channel,
                    std::chrono::milliseconds timeout);

}  // namespace konn::testclient
