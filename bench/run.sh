#!/usr/bin/env bash
# Tunnel benchmark: builds the release binaries, starts proxy-server (unix-socket frontend) and
# proxy-agent (mTLS) on loopback, and runs konn-tunnel-bench, which prints throughput, round-trip
# latency and dial rate through the tunnel beside the direct loopback path of the same run.
# Usage: bench/run.sh [--bytes=N] [--round-trips=N] [--dials=N] [--json=FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bash scripts/setup.sh >/dev/null
bash bench/build-ci.sh proxy-server proxy-agent konn-tunnel-bench
bin="$root/build/ci/bin"

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # A konn agent drains on the first signal and stays up, as upstream's does, until a second.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
bash scripts/gen-certs.sh "$work/certs"
c="$work/certs"

"$bin/proxy-server" --uds-name="$work/konn.sock" --server-port=0 --agent-bind-address=127.0.0.1 \
  --agent-port=0 --health-port=0 --admin-port=0 --cluster-cert="$c/server.crt" \
  --cluster-key="$c/server.key" --cluster-ca-cert="$c/ca.crt" >"$work/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  port=$(grep -o 'agent listener.* on 127.0.0.1:[0-9]*' "$work/server.log" | grep -o '[0-9]*$' || true)
  [ -n "$port" ] && break
  sleep 0.1
done
"$bin/proxy-agent" --proxy-server-host=127.0.0.1 --proxy-server-port="$port" --ca-cert="$c/ca.crt" \
  --agent-cert="$c/agent.crt" --agent-key="$c/agent.key" --agent-id=bench \
  --health-server-port=0 --admin-server-port=0 >"$work/agent.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  grep -q "agent connected" "$work/server.log" && break
  sleep 0.1
done
echo "proxy-server and proxy-agent (optimised build) up; agent over mTLS, frontend on a unix socket"
"$bin/konn-tunnel-bench" --proxy-uds="$work/konn.sock" "$@"
