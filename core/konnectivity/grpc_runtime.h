#pragma once

namespace konn::core::konnectivity {

// Turns off Abseil's lock-order checking for the whole process. Debian builds Abseil without
// NDEBUG, so every absl::Mutex that gRPC takes also records its lock-order edges in one global
// graph (absl's deadlock detection, a debugging aid that aborts on an inversion). In a profile
// of proxy-server when it still ran gRPC C++ that bookkeeping was 1.3% of the samples, in
// libabsl_graphcycles alone. Call once at the start of main(), before any gRPC object exists.
// Only the daemons that run gRPC C++ need it: socks5 and kubeproxy-http, whose GrpcTunnel
// streams run on it; it goes away with them.
void turn_off_lock_order_checks();

}  // namespace konn::core::konnectivity
