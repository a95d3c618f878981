#include "core/relay/read_gate.h"

#include <catch2/catch.hpp>

using konn::core::relay::PauseReason;
using konn::core::relay::ReadGate;

TEST_CASE("read gate opens only when every reason is cleared", "[relay]") {
  ReadGate g;
  CHECK(g.open());
  CHECK(g.pause(PauseReason::QueueFull));
  CHECK_FALSE(g.pause(PauseReason::NoCredit));
  CHECK_FALSE(g.resume(PauseReason::QueueFull));
  CHECK_FALSE(g.open());
  CHECK(g.paused_for(PauseReason::NoCredit));
  CHECK(g.resume(PauseReason::NoCredit));
  CHECK(g.open());
  CHECK_FALSE(g.resume(PauseReason::NoCredit));
}
