#include "core/konnectivity/grpc_runtime.h"

#include <absl/synchronization/mutex.h>

namespace konn::core::konnectivity {

void turn_off_lock_order_checks() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace konn::core::konnectivity
