#!/usr/bin/env bash
# The fleet benchmark (issue 42): konn's proxy-server and upstream's v0.30.4 (bench/build-upstream.sh
# builds it into ~/.cache/konn-upstream/v0.30.4/bin), one after the other in one run, driven by
# konn-fleet-sim: N idle agents, a reconnect storm, routing among 10 / 1 000 / N agents, 100 000
# tunnels, one real agent with many tunnels. Prints one table (konn, upstream, ratio).
#
#   bench/fleet.sh --quick                     # smoke run: 300 agents, 3 000 tunnels (~3 min)
#   bench/fleet.sh [--agents=19000] [--tunnels=100000] [--json=fleet.json]
#   bench/fleet.sh --only=konn --phases=fleet  # one server, without the one-agent phase
#   bench/run-all.sh --fleet [...]             # the same
# The machine's limit of 20 000 descriptors per process (not raisable here) caps N near 19 900.
# Everything runs on loopback and is killed on exit. See bench/fleet/README.md ("Figures").
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
bash bench/build-ci.sh proxy-server proxy-agent konn-fleet-sim
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
exec python3 bench/fleet.py --bin="$src/build/ci/bin" --src="$src" "$@"
