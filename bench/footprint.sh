#!/usr/bin/env bash
# Idle footprint of each daemon beside its anchor, after the same traffic (issue 42): builds the
# daemons (preset ci), installs the peers when missing (bench/install-peers.sh), then
# bench/footprint.py starts konn's proxy-server and proxy-agent beside upstream ANP v0.30.4's,
# socks5 beside dante and microsocks, kubeproxy-http beside `kubectl proxy`, all on loopback,
# drives 500 tunnels and 8 MiB each way through each, waits idle and prints RSS, Pss,
# Private_Dirty, threads and mapped libraries, konn / anchor. Nothing is left running.
#
#   bench/footprint.sh                          # every pair
#   bench/footprint.sh --only=agent,server --detail   # and where konn's RSS goes, by mapping
#   bench/footprint.sh --upstream-bin=DIR --dials=500 --mb=8 --idle=6 --json=fp.json
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
bash bench/install-peers.sh
bash bench/build-ci.sh proxy-server proxy-agent socks5 kubeproxy-http kubeproxy-fake-apiserver \
  konn-loadgen
exec python3 bench/footprint.py --bin="$src/build/ci/bin" --src="$src" "$@"
