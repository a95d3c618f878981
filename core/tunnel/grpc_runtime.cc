#include "core/tunnel/grpc_runtime.h"

#include <absl/synchronization/mutex.h>

namespace konn::core::tunnel {

void turn_off_lock_order_checks() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace konn::core::tunnel
