#include "test-client/channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "test-client/grpc_credentials.h"

namespace konn::testclient {

std::shared_ptr<grpc::Channel> make_channel(const ChannelConfig& config) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!config.uds_path.empty()) {
    return grpc::CreateCustomChannel("unix:" + config.uds_path, grpc::InsecureChannelCredentials(),
                                     args);
  }
  std::string host = config.host;
  // A bare IPv6 literal needs brackets in a gRPC target.
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  auto creds =
      testclient::grpc_channel_credentials(config.ca_cert, config.client_cert, config.client_key);
  return grpc::CreateCustomChannel(host + ":" + std::to_string(config.port), creds, args);
}

bool wait_connected(const std::shared_ptr<grpc::Channel>& channel,
                    std::chrono::milliseconds timeout) {
  return channel->WaitForConnected(std::chrono::system_clock::now() + timeout);
}

}  // namespace konn::testclient
