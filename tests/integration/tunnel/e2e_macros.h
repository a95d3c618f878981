#pragma once

#include <catch2/catch.hpp>

#include "tests/integration/tunnel/tunnel_stack.h"

// Skips (with a visible warning) a test whose daemons have not been built.
#define KONN_REQUIRE_DAEMONS()                                                      \
  do {                                                                              \
    if (!konn::e2e::daemons_built()) {                                              \
      WARN("proxy-server/proxy-agent not built in " << konn::testsupport::bin_dir() \
                                                    << ": skipped");                \
      return;                                                                       \
    }                                                                               \
  } while (0)
