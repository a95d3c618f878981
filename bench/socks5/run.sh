#!/usr/bin/env bash
# Benchmarks our socks5 beside direct loopback, dante (danted) and microsocks, in one run:
#   bulk throughput (one stream, MiB/s), connections per second (4 client threads: connect +
#   SOCKS handshake +
#   1-byte echo + close), and memory per idle session (Pss of the server's process tree with
#   1000 established idle sessions, minus before, / 1000).
# Installs dante-server and microsocks with apt-get when absent. Builds a Release tree.
#
#   bench/socks5/run.sh            # BUILD=build/bench-socks5 MIB=1024 SECONDS=3 IDLE=1000
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build/bench-socks5}
MIB=${MIB:-1024}
CPS_SECONDS=${SECONDS_CPS:-3}
IDLE=${IDLE:-1000}
WORK=$(mktemp -d /tmp/konn-socks5-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

need=()
command -v danted >/dev/null || need+=(dante-server)
command -v microsocks >/dev/null || need+=(microsocks)
if [ "${#need[@]}" -gt 0 ]; then
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
DANTED=$(command -v danted)
MICROSOCKS=$(command -v microsocks)

export CCACHE_DIR=${CCACHE_DIR:-/tmp/ccache}
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKONN_BUILD_TESTS=OFF "${launcher[@]}" >/dev/null
cmake --build "$BUILD" --target socks5 socks5_bench -j2 >/dev/null
BENCH=$BUILD/bin/socks5_bench

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# A free port below the ephemeral range: the cps runs leave thousands of TIME_WAIT sockets on
# ephemeral ports, and servers without SO_REUSEADDR (microsocks) cannot bind those.
free_port() {
  python3 - <<'PY'
import random, socket
for _ in range(200):
    p = random.randint(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        print(p)
        break
    except OSError:
        pass
    finally:
        s.close()
PY
}
wait_port() {
  for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "port $1 never opened" >&2; return 1
}
# Sum of Pss (KiB) over a process and its descendants.
tree_pss() {
  local pids=("$1") all=() p
  while [ "${#pids[@]}" -gt 0 ]; do
    p=${pids[0]}; pids=("${pids[@]:1}"); all+=("$p")
    for c in $(pgrep -P "$p" || true); do pids+=("$c"); done
  done
  local sum=0 v
  for p in "${all[@]}"; do
    v=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
    sum=$((sum + ${v:-0}))
  done
  echo "$sum"
}

start_server() {  # name → sets SERVER_PID, PROXY
  local name=$1 port
  port=$(free_port)
  case $name in
    direct) SERVER_PID=""; PROXY=""; return ;;
    konn)
      "$BUILD/bin/socks5" --bind-address=127.0.0.1 --port="$port" --log-level=warn \
        >"$WORK/konn.log" 2>&1 &
      ;;
    dante)
      cat >"$WORK/danted.conf" <<CONF
logoutput: $WORK/danted.log
internal: 127.0.0.1 port = $port
external: 127.0.0.1
clientmethod: none
socksmethod: none
user.privileged: root
user.unprivileged: nobody
client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }
socks pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }
CONF
      "$DANTED" -f "$WORK/danted.conf" -p "$WORK/danted.pid" >>"$WORK/danted.log" 2>&1 &
      ;;
    microsocks) "$MICROSOCKS" -i 127.0.0.1 -p "$port" >"$WORK/microsocks.log" 2>&1 & ;;
  esac
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  PROXY="--proxy=127.0.0.1:$port"
  wait_port "$port"
}

stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}

declare -A BULK CPS MEM
for name in direct konn dante microsocks; do
  start_server "$name"
  # shellcheck disable=SC2086
  BULK[$name]=$("$BENCH" bulk $PROXY --mib="$MIB" | sed 's/bulk_mib_s=//')
  # shellcheck disable=SC2086
  CPS[$name]=$("$BENCH" cps $PROXY --seconds="$CPS_SECONDS" --threads=4 | sed 's/cps=\([0-9]*\).*/\1/')
  if [ -n "$SERVER_PID" ]; then
    before=$(tree_pss "$SERVER_PID")
    mkfifo "$WORK/hold"
    # shellcheck disable=SC2086
    "$BENCH" idle $PROXY --conns="$IDLE" <"$WORK/hold" >"$WORK/idle.out" &
    idle_pid=$!
    exec 4>"$WORK/hold"
    for _ in $(seq 1 600); do grep -q ready "$WORK/idle.out" 2>/dev/null && break; sleep 0.05; done
    sleep 0.5  # let the server finish its per-session setup
    after=$(tree_pss "$SERVER_PID")
    exec 4>&-
    wait "$idle_pid" || true
    rm -f "$WORK/hold"
    MEM[$name]=$(awk -v a="$after" -v b="$before" -v n="$IDLE" 'BEGIN {printf "%.1f", (a-b)/n}')
  else
    MEM[$name]="-"
  fi
  stop_server
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b+0 == 0) print "-"; else printf "%.2f", a/b }'; }
printf '\n%-12s %14s %10s %12s %10s %18s %10s\n' server "bulk MiB/s" "vs direct" "conn/s" "vs dante" "KiB/idle session" "vs micro"
for name in direct konn dante microsocks; do
  printf '%-12s %14s %10s %12s %10s %18s %10s\n' "$name" "${BULK[$name]}" \
    "$(ratio "${BULK[$name]}" "${BULK[direct]}")" "${CPS[$name]}" \
    "$(ratio "${CPS[$name]}" "${CPS[dante]}")" "${MEM[$name]}" \
    "$( [ "$name" = direct ] && echo - || ratio "${MEM[$name]}" "${MEM[microsocks]}")"
done
echo
echo "goals: konn bulk >= 0.90 x direct; konn conn/s >= 2 x dante; konn KiB/idle < microsocks"
