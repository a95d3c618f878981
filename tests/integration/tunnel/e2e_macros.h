#pragma once

#include <catch2/catch.hpp>

#include "tests/integration/tunnel/tunnel_stack.h"

// Fails a test whose daemons have not been built: the default build target builds them, so a
// missing binary is a broken build, not a reason to pass.
#define KONN_REQUIRE_DAEMONS()                                                         \
  do {                                                                                 \
    if (!konn::e2e::daemons_built()) {                                                 \
      FAIL("proxy-server/proxy-agent not built in " << konn::testsupport::bin_dir()    \
                                                    << " (build the default target)"); \
    }                                                                                  \
  } while (0)
