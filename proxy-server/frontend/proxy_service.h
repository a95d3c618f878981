#pragma once

#include "konnectivity/client.grpc.pb.h"

namespace konn::server {

class Router;

// ProxyService (`/ProxyService/Proxy`): each call becomes a GrpcFrontend reactor.
class ProxyServiceImpl : public ProxyService::CallbackService {
 public:
  explicit ProxyServiceImpl(Router& router) : router_(router) {}
  grpc::ServerBidiReactor<Packet, Packet>* Proxy(grpc::CallbackServerContext* ctx) override;

 private:
  Router& router_;
};

}  // namespace konn::server
