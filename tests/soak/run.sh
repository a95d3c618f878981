#!/usr/bin/env bash
# The fault and soak test in one command (issue 8): builds the optimised `ci` preset (with ccache
# when installed) and runs konn-soak with its full defaults (10 000 tunnels over about 3 minutes,
# faults on). Flags are passed on; the JSON result goes to build/ci/soak-<seed>.json unless
# --json= is given.
#   tests/soak/run.sh [--tunnels=N] [--duration=S] [--seed=N] [other konn-soak flags]
set -euo pipefail
cd "$(dirname "$0")/../.."

launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake --preset ci "${launcher[@]}" >/dev/null
cmake --build --preset ci -j "$(nproc)" --target konn-soak proxy-server proxy-agent

args=()
seed=""
json=""
for a in "$@"; do
  case "$a" in
    --duration=*[0-9]) args+=("${a}s") ;;  # plain seconds, as the usage line says
    --seed=*) seed=${a#--seed=}; args+=("$a") ;;
    --json=*) json=${a#--json=}; args+=("$a") ;;
    *) args+=("$a") ;;
  esac
done
if [ -z "$seed" ]; then
  seed=$(od -An -N3 -tu4 /dev/urandom | tr -d ' ')
  seed=$((seed + 1))
  args+=("--seed=$seed")
fi
if [ -z "$json" ]; then args+=("--json=build/ci/soak-$seed.json"); fi
export KONN_BIN_DIR="$PWD/build/ci/bin"
exec build/ci/bin/konn-soak "${args[@]}"
