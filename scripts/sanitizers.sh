#!/usr/bin/env bash
# The sanitizer passes of the test suite (scripts/test.sh runs them after the optimised build):
#   asan-ubsan  every test, every daemon the tests start built with -fsanitize=address,undefined;
#               any report fails the run (UBSan aborts, LSan checks each process at exit).
#   tsan        the tests whose threads are ours (Asio io_contexts, worker pools, admin and lease
#               threads, the agent's hand-off from gRPC callbacks to its io_contexts); see
#               TSAN_TESTS below. Debian's gRPC, protobuf and abseil are not built for TSan, so
#               reports with a frame in them are suppressed (tools/sanitizers/tsan.supp), and the
#               long bulk and many-tunnel gRPC cases, where TSan would only see those libraries
#               and run 10-20x slower, are left to the other two passes.
# Usage: scripts/sanitizers.sh [asan|tsan]   (both when no argument)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
source scripts/lib/phases.sh


# The tests ThreadSanitizer runs: the unit and integration labels (every library, the agent's and
# server's reactors against in-process peers, kubeproxy-http end to end), without the cases that
# move bulk data or many tunnels through gRPC. Those run 10-20x slower under TSan, their threads
# are gRPC's, and there is a worse reason: in a TSan-instrumented process the uninstrumented
# Debian gRPC 1.51 transport stops reading its socket during a sustained bulk transfer (seen with
# only the load generator instrumented, and with only the server and agent instrumented: the
# stalled side's Recv-Q stays full while its threads sit idle; never seen in the optimised or
# ASan builds, which run these cases). bench.loadgen.smoke drives bulk gRPC tunnels, so it is
# left to the other two passes as well, and so is proxy-test-client's --pipe case (3 MiB through
# one gRPC tunnel; it stalled at 1.75 MiB twice in a row in one TSan pass).
TSAN_LABELS='^(unit|integration)$'
TSAN_EXCLUDE='flow control|concurrent tunnels|stalled reader|bulk|MiB|GiB|throughput|holds the sender back|holds the stream back|many tunnels|mid-transfer|soak|bench.loadgen.smoke|--pipe copies stdin'

# Neither pass runs the `kube` label (tests/integration/kube: a real kube-apiserver and etcd):
# what it checks is wire compatibility with the real client, which instrumentation does not
# change, while each of its cases boots etcd and kube-apiserver (tens of seconds on a 2-core
# runner) and moves 16 MiB and 200 webhook-checked creates; the daemons' own paths it exercises
# run under both sanitizers in the e2e label. The optimised pass of scripts/test.sh runs it.

# Both passes retry a failing test once, as scripts/test.sh does: a report in the first run still
# shows in the log and is a bug to fix (a race TSan saw once is real).
build_asan() { cmake --preset asan-ubsan >/dev/null && cmake --build --preset asan-ubsan -j "$(nproc)"; }
test_asan() {
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0" \
  LSAN_OPTIONS="suppressions=$root/tools/sanitizers/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    ctest --preset asan-ubsan -j 2 --timeout 600 --repeat until-pass:2 -LE '^kube$'
}
run_asan() {
  phase "asan-ubsan build" build_asan
  phase "asan-ubsan suite" test_asan
}

# Only what this pass runs (konn_tsan_set in CMakeLists.txt): the tests of the other labels
# appear to ctest as *_NOT_BUILT, which the label filter leaves out.
build_tsan() {
  cmake --preset tsan >/dev/null && cmake --build --preset tsan -j "$(nproc)" --target konn_tsan_set
}
test_tsan() {
  TSAN_OPTIONS="suppressions=$root/tools/sanitizers/tsan.supp:second_deadlock_stack=1:halt_on_error=0:exitcode=66" \
    ctest --preset tsan -j 2 --timeout 600 --repeat until-pass:2 -L "$TSAN_LABELS" -E "$TSAN_EXCLUDE"
}
run_tsan() {
  phase "tsan build" build_tsan
  phase "tsan suite" test_tsan
}

case "${1:-all}" in
  asan) run_asan ;;
  tsan) run_tsan ;;
  all) run_asan; run_tsan ;;
  *) echo "usage: scripts/sanitizers.sh [asan|tsan]" >&2; exit 2 ;;
esac
phase_summary
