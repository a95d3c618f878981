#include "core/konnectivity/grpc_runtime.h"

#include <absl/synchronization/mutex.h>

#include <catch2/catch.hpp>

// With Abseil's lock-order checking on (Debian's default build), taking two mutexes in both
// orders aborts the process. After turn_off_lock_order_checks() it is allowed (and harmless
// here: one thread).
TEST_CASE("lock order checks are off: two mutexes taken in both orders", "[konnectivity][unit]") {
  konn::core::konnectivity::turn_off_lock_order_checks();
  absl::Mutex a;
  absl::Mutex b;
  int sections = 0;
  {
    absl::MutexLock la(&a);
    absl::MutexLock lb(&b);
    ++sections;
  }
  {
    absl::MutexLock lb(&b);
    absl::MutexLock la(&a);
    ++sections;
  }
  CHECK(sections == 2);
}
