#!/usr/bin/env bash
# The whole benchmark in one command (issue 9): builds the optimised binaries (preset ci, with
# ccache when present), installs the peers from Debian when missing (bench/install-peers.sh: no
# system service of theirs is left running), then bench/run_all.py starts every daemon and peer
# on loopback, runs every workload against each and prints one table (medians, ratios to the
# direct path and to the peer of the same run).
#
#   bench/run-all.sh                 # 3 runs, 1 GiB bulk transfers, 3 s timed workloads
#   bench/run-all.sh --quick         # smoke run: everything once, small and short (~1-2 min)
#   bench/run-all.sh --runs=5 --json=bench.json [--only=direct,konn-grpc] [--keep-work]
#   bench/run-all.sh --upstream-bin=DIR  # also upstream ANP (bench/build-upstream.sh): anp-grpc,
#                                      # anp-connect, and konn / upstream ratios of the same run
#   bench/run-all.sh --fleet [...]   # the fleet benchmark instead (bench/fleet.sh, issue 42): the
#                                      # other arguments go to it
# See docs/performance.md for what each workload does.
set -euo pipefail
cd "$(dirname "$0")/.."
for a in "$@"; do
  if [ "$a" = "--fleet" ]; then
    rest=()
    for b in "$@"; do [ "$b" = "--fleet" ] || rest+=("$b"); done
    exec bash bench/fleet.sh "${rest[@]}"
  fi
done
src=$(pwd)
bash bench/install-peers.sh
bash bench/build-ci.sh proxy-server proxy-agent socks5 kubeproxy-http kubeproxy-fake-apiserver \
  konn-loadgen
# The Go client (grpc-go, built offline from Debian's packages); the run goes on without it if
# it cannot be built.
go_client=()
case " $* " in
  *" --no-go "*) ;;
  *)
    if bash bench/goclient/build.sh "$src/build/ci/bin/konn-go-client"; then
      go_client=(--go-client="$src/build/ci/bin/konn-go-client")
    else
      echo "run-all.sh: konn-go-client not built; konn-grpc-go is left out" >&2
    fi
    ;;
esac
# Tens of thousands of sockets in the daemons, the peers and the load generator.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" -lt 65536 ]; then ulimit -n 65536 2>/dev/null || true; fi
exec python3 bench/run_all.py --bin="$src/build/ci/bin" --src="$src" "${go_client[@]}" "$@"
