#pragma once

#include <memory>

#include "test-client/byte_stream.h"
#include "test-client/test_client_options.h"

namespace konn::testclient {

// proxy-test-client's behaviour: dial the destination through the frontend (a gRPC tunnel, or an
// HTTP CONNECT with --mode=http-connect), then either fetch --request-path and print the body, or
// pipe stdin/stdout through the stream.
class ClientApp {
 public:
  explicit ClientApp(const TestClientOptions& options) : options_(options) {}

  // Returns the process exit code: 0 on success (a 2xx response, or a pipe that the destination
  // closed cleanly); 1 on a dial error (the agent's text, or the CONNECT reply's status line and
  // body, is printed), a non-2xx status, or a broken stream. Messages go to stderr, payload to
  // stdout (fd 1); pipe mode reads fd 0.
  int run();

 private:
  // The dialled stream, or nullptr after printing why not.
  std::unique_ptr<ByteStream> dial();
  int fetch(ByteStream& stream);
  int pipe(ByteStream& stream);

  const TestClientOptions& options_;
};

}  // namespace konn::testclient
