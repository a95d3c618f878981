#!/usr/bin/env bash
# Functional test of konn-loadgen, the benchmark's load generator (ctest bench.loadgen.smoke).
# Asserts no timing: every mode runs with tiny sizes directly, through konn's socks5 and through
# the Konnectivity tunnel (gRPC frontend on the async client, and HTTP CONNECT, over unix
# sockets, agent over mTLS), prints its JSON and exits 0; and a destination that answers with
# the wrong bytes makes it fail loudly.
#   loadgen_smoke_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=${1:?usage: loadgen_smoke_test.sh BIN_DIR SOURCE_DIR}
src=${2:?usage: loadgen_smoke_test.sh BIN_DIR SOURCE_DIR}
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

wait_for() {  # file pattern: prints the first matching line, within 30 s
  for _ in $(seq 600); do
    if line=$(grep -m1 "$2" "$1" 2>/dev/null); then
      echo "$line"
      return 0
    fi
    sleep 0.05
  done
  echo "timed out waiting for '$2' in $1:" >&2
  cat "$1" >&2
  return 1
}
expect() {  # json-key command...: runs the command, which must exit 0 and print the key
  local key=$1
  shift
  local out
  if ! out=$("$@"); then
    echo "FAIL: $* exited non-zero" >&2
    return 1
  fi
  if ! grep -q "\"$key\"" <<<"$out"; then
    echo "FAIL: $* printed no $key: $out" >&2
    return 1
  fi
  echo "ok: $*"
}

"$bin/konn-loadgen" serve --port=0 >"$work/dest.log" 2>&1 &
pids+=($!)
dest=$(wait_for "$work/dest.log" "listening on" | sed 's/.*listening on //')

"$bin/socks5" --bind-address=127.0.0.1 --port=0 >"$work/socks5.log" 2>&1 &
pids+=($!)
s5=$(wait_for "$work/socks5.log" "listening on" | grep -o '127\.0\.0\.1:[0-9]*')

bash "$src/scripts/gen-certs.sh" "$work/certs"
c=$work/certs
vias=(direct "socks5://$s5")
for mode in grpc http-connect; do
  "$bin/proxy-server" --mode="$mode" --uds-name="$work/$mode.sock" --server-port=0 \
    --agent-bind-address=127.0.0.1 --agent-port=0 --health-port=0 --admin-port=0 \
    --cluster-cert="$c/server.crt" --cluster-key="$c/server.key" \
    --cluster-ca-cert="$c/ca.crt" >"$work/$mode-server.log" 2>&1 &
  pids+=($!)
  port=$(wait_for "$work/$mode-server.log" "agent listener" | grep -o '127\.0\.0\.1:[0-9]*' |
    cut -d: -f2)
  "$bin/proxy-agent" --proxy-server-host=127.0.0.1 --proxy-server-port="$port" \
    --ca-cert="$c/ca.crt" --agent-cert="$c/agent.crt" --agent-key="$c/agent.key" \
    --agent-id="smoke-$mode" --health-server-port=0 --admin-server-port=0 \
    >"$work/$mode-agent.log" 2>&1 &
  pids+=($!)
  wait_for "$work/$mode-server.log" "agent connected" >/dev/null
done
vias+=("grpc+unix://$work/grpc.sock" "connect+unix://$work/http-connect.sock")

for via in "${vias[@]}"; do
  lg=("$bin/konn-loadgen")
  common=(--via="$via" --target="$dest")
  expect mb_s "${lg[@]}" bulk "${common[@]}" --direction=down --streams=2 --bytes=3000001
  expect mb_s "${lg[@]}" bulk "${common[@]}" --direction=up --streams=2 --bytes=3000001
  expect p99_us "${lg[@]}" rr "${common[@]}" --tunnels=3 --duration=100ms
  expect rate "${lg[@]}" dials "${common[@]}" --concurrency=2 --duration=100ms
  expect rate "${lg[@]}" dials "${common[@]}" --concurrency=2 --request=true --duration=100ms
  expect p99_ratio "${lg[@]}" hol "${common[@]}" --tunnels=2 --threads=2 --duration=100ms
  expect closed "${lg[@]}" hold "${common[@]}" --count=20 --concurrency=4 </dev/null
done

# Wrong bytes fail loudly: a plain-HTTP server stands in for the destination, so the download's
# bytes are its error answer, not the pattern; and a server that closes early (socks5, which
# cannot parse the request) is a failure too.
"$bin/kubeproxy-fake-apiserver" --plain >"$work/plain.log" 2>&1 &
pids+=($!)
plain=$(wait_for "$work/plain.log" "listening on" | sed 's/.*listening on //')
for wrong in "$plain:bytes wrong" "$s5:ended after"; do
  addr=${wrong%%:*}:$(cut -d: -f2 <<<"$wrong")
  why=${wrong#*:*:}
  if out=$("$bin/konn-loadgen" bulk --via=direct --target="$addr" --bytes=100000 2>&1); then
    echo "FAIL: a download from $addr passed: $out" >&2
    exit 1
  fi
  grep -q "FAILED: download $why" <<<"$out" || { echo "FAIL: expected '$why': $out" >&2; exit 1; }
  echo "ok: fails loudly: $out"
done
