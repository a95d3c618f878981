#pragma once

#include "test-client/test_client_options.h"

namespace konn::testclient {

// proxy-test-client's behaviour: dial the destination through the frontend, then either fetch
// --request-path and print the body, or pipe stdin/stdout through the tunnel.
class ClientApp {
 public:
  explicit ClientApp(const TestClientOptions& options) : options_(options) {}

  // Returns the process exit code: 0 on success (a 2xx response, or a pipe that ended with
  // CLOSE_RSP); 1 on a dial error (the agent's text is printed), a non-2xx status, or a broken
  // tunnel. Messages go to stderr, payload to stdout (fd 1); pipe mode reads fd 0.
  int run();

 private:
  int fetch();
  int pipe();

  const TestClientOptions& options_;
};

}  // namespace konn::testclient
