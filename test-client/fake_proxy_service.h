#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/server.h>

#include "konnectivity/client.grpc.pb.h"

namespace konn::testclient {

// Test double of the proxy-server frontend, for the client's unit tests: a real gRPC server on a
// unix socket whose behaviour is chosen by the dialled address's host:
//   echo:P       DIAL_RSP{connectID 7}; echoes DATA; CLOSE_REQ → CLOSE_RSP
//   refuse:P     DIAL_RSP{error "dial tcp 127.0.0.1:P: connect: connection refused"}
//   silent:P     never answers the dial (records DIAL_CLS)
//   noclose:P    as echo, but ignores CLOSE_REQ
//   hangup:P     DIAL_RSP, DATA "bye", CLOSE_RSP (the destination closed)
//   sink:P       counts DATA bytes; CLOSE_REQ → DATA "<count>" then CLOSE_RSP
//   source:N     sends N bytes (byte i = i % 251) in 256 KiB DATA, then CLOSE_RSP
//   http:P       answers one GET with a chunked "hello from fake" page, then CLOSE_RSP
//   echoclose:N  echoes, and sends CLOSE_RSP after echoing N bytes
// N may also be given as "mode-N:port" (for clients that check the port range).
// After CLOSE_RSP it keeps reading until the client half-closes, then finishes with OK.
class FakeProxyService {
 public:
  // h2c on a unix socket.
  explicit FakeProxyService(const std::string& socket_path);
  // TLS on 127.0.0.1 (a free port: port()) with `cert` and `key`; clients must present a
  // certificate signed by `client_ca` (kube-apiserver's mutual TLS).
  struct Tls {
    std::string cert;
    std::string key;
    std::string client_ca;
  };
  explicit FakeProxyService(const Tls& tls);
  ~FakeProxyService();

  int port() const { return port_; }

  // What the fake observed, summed over all streams.
  struct Seen {
    std::vector<Packet> dial_requests;
    std::vector<int64_t> close_dials;  // random of each DIAL_CLS
    size_t max_data = 0;               // largest DATA payload received
    uint64_t data_bytes = 0;           // DATA payload bytes received
    int close_requests = 0;
    int streams_finished = 0;  // handlers that saw the client half-close
  };
  Seen seen() const;
  // Bytes the source: behaviour has handed to gRPC so far.
  uint64_t source_sent() const { return source_sent_.load(); }

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<uint64_t> source_sent_{0};
  int port_ = 0;
};

}  // namespace konn::testclient
