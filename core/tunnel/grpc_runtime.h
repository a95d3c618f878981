#pragma once

namespace konn::core::tunnel {

// Turns off Abseil's lock-order checking for the whole process. Debian builds Abseil without
// NDEBUG, so every absl::Mutex that gRPC takes also records its lock-order edges in one global
// graph (absl's deadlock detection, a debugging aid that aborts on an inversion). In a profile
// of proxy-server in gRPC mode that bookkeeping was 1.3% of the samples, in libabsl_graphcycles
// alone. Call once at the start of main(), before any gRPC object exists.
void turn_off_lock_order_checks();

}  // namespace konn::core::tunnel
