#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "test-client/byte_stream.h"
#include "test-client/channel.h"

namespace konn::testclient {

// One HTTP CONNECT tunnel through a proxy-server in --mode=http-connect, the way kube-apiserver's
// HTTPConnect egress uses it: one connection per dial, over the frontend's unix socket (plain
// HTTP/1.1) or TCP with mutual TLS. After `200` the connection carries the destination's bytes.
//
// Half-close: over the unix socket, close_write() shuts down our write side (the server passes
// the EOF on to the destination). Over TLS it does nothing: a TLS close_notify cannot leave the
// read side open, so the write side stays open until close().
//
// Threads: one private thread runs the connection's io_context; the ByteStream calls block on it
// and may come from two threads as ByteStream documents.
class ConnectStream : public ByteStream {
 public:
  // Received bytes held for read() before the connection stops reading (TCP flow control then
  // pushes back on the server).
  static constexpr size_t kInboxLimit = 8 * 1024 * 1024;
  // Largest piece read() returns.
  static constexpr size_t kReadChunk = 64 * 1024;
  // Largest error body kept from a refused CONNECT.
  static constexpr size_t kMaxErrorBody = 64 * 1024;

  struct DialResult {
    std::unique_ptr<ConnectStream> stream;  // set when the server answered 200
    // Otherwise why not: the reply's status line and body ("HTTP/1.1 502 Bad Gateway: dial tcp
    // ...: connect: connection refused"), or the transport error ("connect unix ...", "TLS
    // handshake ...", "no reply to CONNECT within 10000ms").
    std::string error;
    int status = 0;  // the reply's status code, 0 when no reply head arrived
  };

  // Connects to the frontend in `frontend` (uds_path, else host:port with TLS: ca_cert verifies
  // the server certificate against `host`, client_cert/client_key are presented), sends
  // "CONNECT <address> HTTP/1.1" with "Host: <address>", and reads the reply head with the
  // project's HTTP/1.1 parser. Anything but 200 is a failure. Bytes that arrive right after the
  // 200 head are the destination's first bytes. Everything is bounded by `timeout`. Never
  // throws.
  static DialResult dial(const ChannelConfig& frontend, const std::string& address,
                         std::chrono::milliseconds timeout);

  ~ConnectStream() override = default;

  // Whether the connection is TLS (close_write() then does nothing).
  virtual bool tls() const = 0;

 protected:
  ConnectStream() = default;
};

}  // namespace konn::testclient
