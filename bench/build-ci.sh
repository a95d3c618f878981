#!/usr/bin/env bash
# Builds the given targets with the `ci` preset (the test suite's optimised build, -O2, so the
# benchmarks share it), through ccache when it is installed.
#
#   bench/build-ci.sh TARGET...
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake --preset ci "${launcher[@]}" >/dev/null
cmake --build --preset ci -j "$(nproc)" --target "$@" >/dev/null
