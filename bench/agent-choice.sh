#!/usr/bin/env bash
# The proxy-server's agent choice with one slow agent, against upstream, in one run: builds the
# binaries it needs (preset ci), then bench/agent_choice.py starts upstream v0.30.4's server and
# agents (bench/build-upstream.sh; left out with --upstream-bin=), konn with
# --agent-choice=random and konn with --agent-choice=least-loaded, each with three agents of
# which one reaches the server through a delaying relay, and prints one table: dials/s, p50,
# p99 and each agent's share of the dials. See bench/README.md ("Agent choice").
#
#   bench/agent-choice.sh [--delay-ms=20,200] [--duration=10] [--concurrency=16] [--runs=1]
#                         [--upstream-bin=DIR] [--json=FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
bash bench/build-ci.sh proxy-server proxy-agent konn-loadgen
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
exec python3 bench/agent_choice.py --bin="$src/build/ci/bin" --src="$src" "$@"
