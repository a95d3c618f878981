#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (issue 8) for a while each, and prints one line per
# target: executions, rate, corpus growth and the result. Builds the `fuzz` preset (clang-14,
# ASan+UBSan, libFuzzer) first, installing clang-14 and its runtime when missing.
#
# Usage: scripts/fuzz.sh [--seconds=N] [--merge] [target ...]
#   --seconds=N  time per target (default 60)
#   --merge      minimise what the run found into the checked-in corpus (tests/fuzz/corpus/)
#   target       names as in tests/fuzz/CMakeLists.txt (default: all)
#
# New inputs go to build/fuzz/corpus/<target>/ (seeded from the checked-in corpus), crashes and
# leaks to build/fuzz/artifacts/; a target that finds one makes the script exit 1.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

seconds=60
merge=0
targets=()
for a in "$@"; do
  case "$a" in
    --seconds=*) seconds=${a#--seconds=} ;;
    --merge) merge=1 ;;
    -*) echo "fuzz.sh: unknown option $a" >&2; exit 2 ;;
    *) targets+=("$a") ;;
  esac
done

need=()
for p in clang-14 libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
bash scripts/setup.sh

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)"

if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^konn_add_fuzzer(\([a-z0-9_]*\).*/\1/p' tests/fuzz/CMakeLists.txt)
fi

export KONN_SOURCE_DIR="$root"  # the packet targets make test certificates with gen-certs.sh
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
out=build/fuzz
mkdir -p "$out/artifacts" "$out/logs"
failed=0
printf '%-24s %8s %12s %9s %14s  %s\n' target seconds executions exec/s corpus result
for t in "${targets[@]}"; do
  seeds=tests/fuzz/corpus/$t
  work=$out/corpus/$t
  mkdir -p "$work"
  before=$(find "$seeds" "$work" -type f | wc -l)
  log=$out/logs/$t.log
  status=0
  "$out/fuzz/$t" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/$t-" "$work" "$seeds" >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  after=$(find "$seeds" "$work" -type f | wc -l)
  result=ok
  if [ "$status" -ne 0 ]; then
    result="FOUND (exit $status): $(grep -m1 -E 'ERROR|SUMMARY|invariant|deadly|Timeout' "$log" || true), log $log"
    failed=1
  fi
  printf '%-24s %8s %12s %9s %6s -> %-5s  %s\n' "$t" "$seconds" "${execs:-?}" "${rate:-?}" \
    "$before" "$after" "$result"
  if [ "$merge" = 1 ] && [ "$status" -eq 0 ]; then
    "$out/fuzz/$t" -merge=1 -timeout=30 "$seeds" "$work" >>"$log" 2>&1
  fi
done
exit "$failed"
