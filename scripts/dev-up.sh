#!/usr/bin/env bash
# Starts the konn suite locally on built-in defaults, for a first look:
#   installs missing Debian packages, builds the release binaries it starts, generates development
#   certificates, and starts on loopback:
#     demo-origin     127.0.0.1:18080   a tiny HTTP server standing in for a node or webhook
#     proxy-server    frontend unix:.run/konn.sock (grpc mode), agents on 127.0.0.1:8091 (mTLS);
#                                       upstream's defaults for the rest: health *:8092,
#                                       admin 127.0.0.1:8095
#     proxy-agent     connected to the server, dialing what it is asked to; upstream's defaults:
#                                       health *:8093, admin 127.0.0.1:8094
#     socks5          127.0.0.1:1080    SOCKS5 (no auth on loopback); every CONNECT goes through
#                                       the proxy-server's gRPC socket (--konnectivity-*), so it
#                                       reaches what the agent reaches; health/metrics on
#                                       127.0.0.1:8096 (asked for: by default *:8096)
#     kubeproxy-http  127.0.0.1:8001    kubectl-proxy style, in front of your current kubeconfig
#                                       context, or else of a local fake apiserver (TLS, token);
#                                       health/metrics on 127.0.0.1:8097 (asked for: in proxy
#                                       mode it opens only --port unless --health-port is given)
#     kubeproxy-http  127.0.0.1:8002    a second one, --mode=connect (HTTP CONNECT proxy), its
#                                       CONNECTs also through the proxy-server's socket;
#                                       health/metrics on 127.0.0.1:8098
#   writes kubeconfigs whose cluster has a proxy-url: through socks5 (socks5:// and socks5h://)
#   and through the CONNECT proxy, so kubectl reaches the apiserver through the tunnel, then
#   prints what to try (tests/quickstart/dev_up_test.py runs every printed command).
#   Logs, pids and kubeconfigs go to .run/. Stop everything with: scripts/dev-up.sh stop
# Environment (for tests): KONN_DEV_UP_BUILD_DIR replaces build/ci (still preset ci);
# KONN_DEV_UP_NO_BUILD=1 skips setup, configure and build and uses the binaries in
# KONN_DEV_UP_BIN_DIR (default: its bin/); KONN_DEV_UP_RUN_DIR replaces .run/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
run=${KONN_DEV_UP_RUN_DIR:-$root/.run}
# The same optimised build the test suite uses (preset ci), so the two README commands share it.
build=${KONN_DEV_UP_BUILD_DIR:-$root/build/ci}
[[ "$build" == /* ]] || build="$root/$build"
bin=${KONN_DEV_UP_BIN_DIR:-$build/bin}
no_build=${KONN_DEV_UP_NO_BUILD:-0}

stop_all() {
  [ -d "$run/pids" ] || return 0
  local pids=() f
  for f in "$run"/pids/*; do
    [ -e "$f" ] || continue
    pids+=("$(cat "$f")")
    rm -f "$f"
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  kill "${pids[@]}" 2>/dev/null || true
  # A draining proxy-agent stays up until a second signal, as upstream's does: once the first
  # was handled, whatever still runs gets another.
  for _ in $(seq 20); do
    kill -0 "${pids[@]}" 2>/dev/null || return 0
    sleep 0.1
  done
  kill "${pids[@]}" 2>/dev/null || true
}

if [ "${1:-}" = "stop" ]; then
  stop_all
  echo "konn dev suite stopped"
  exit 0
fi

# One line per phase: "dev-up: NAME  12.3 s  DETAIL".
phase_began=0
phase_start() { phase_began=$(date +%s.%N); }
phase_done() {  # phase_done NAME [DETAIL]
  local took
  took=$(awk -v a="$phase_began" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  printf 'dev-up: %-9s %6s s  %s\n' "$1" "$took" "${2:-}"
}

mkdir -p "$run/logs"
fail_with_log() {  # fail_with_log WHAT LOG: the log's last lines, then exit
  echo "dev-up: $1 failed; the end of $2:" >&2
  tail -n 60 "$2" >&2
  exit 1
}

# kubeproxy-http fronts your current kubeconfig context when there is one, else the fake
# apiserver, which is then the one extra program to build.
use_fake_apiserver=1
if kubectl config current-context >/dev/null 2>&1; then use_fake_apiserver=0; fi
targets=(proxy-server proxy-agent proxy-test-client demo-origin socks5 kubeproxy-http)
[ "$use_fake_apiserver" = 0 ] || targets+=(kubeproxy-fake-apiserver)

if [ "$no_build" = 1 ]; then
  for t in "${targets[@]}"; do
    [ -x "$bin/$t" ] || { echo "dev-up: $bin/$t is missing (KONN_DEV_UP_NO_BUILD=1)" >&2; exit 1; }
  done
  echo "dev-up: setup, configure and build skipped (KONN_DEV_UP_NO_BUILD=1): binaries of $bin"
else
  phase_start
  bash scripts/setup.sh
  phase_done setup

  phase_start
  cmake --preset ci -B "$build" >"$run/logs/configure.log" 2>&1 ||
    fail_with_log configure "$run/logs/configure.log"
  phase_done configure "(cmake --preset ci: $build)"

  # The estimate: the compile steps ninja would run (a dry run on a copy of build.ninja: the
  # real one would first re-run cmake's glob check and stop there), times the median compile
  # time of this build's earlier non-cached compiles (.ninja_log), else 10 s (a unity batch on
  # a quiet 2-core machine), over the cores.
  dry=$(mktemp "$build/.dev-up-dry.XXXXXX")
  cp "$build/build.ninja" "$dry"
  steps=$(ninja -C "$build" -f "$dry" -n "${targets[@]}" 2>/dev/null |
    grep -c 'Building CXX' || true)
  rm -f "$dry"
  per_step=10
  if [ -f "$build/.ninja_log" ]; then  # absent in a fresh clone (and awk would fail the pipe)
    per_step=$(awk -F'\t' '$4 ~ /\.o$/ && $2 - $1 > 1500 { print ($2 - $1) / 1000 }' \
      "$build/.ninja_log" | sort -n |
      awk '{ v[NR] = $1 } END { if (NR >= 10) printf "%.0f", v[int((NR + 1) / 2)]; else print 10 }')
  fi
  cores=$(nproc)
  if [ "$steps" -eq 0 ]; then
    echo "dev-up: build: the binaries are up to date (${targets[*]})"
  else
    est=$(( (steps * per_step + cores - 1) / cores ))
    est_text="about $(( (est + 59) / 60 )) min"
    [ "$est" -ge 60 ] || est_text="under a minute"
    echo "dev-up: build: $steps compile step(s) for ${targets[*]}"
    echo "dev-up: build: $est_text here (~${per_step} s a step on $cores cores; less with ccache" \
      "hits, more under load: $(cut -d' ' -f1 /proc/loadavg) now)"
  fi

  phase_start
  # ninja's lines go to build.log; a progress line every tenth of the way.
  set +e
  cmake --build "$build" -j "$cores" --target "${targets[@]}" 2>&1 | {
    shown=0
    : >"$run/logs/build.log"
    while IFS= read -r line; do
      printf '%s\n' "$line" >>"$run/logs/build.log"
      if [[ "$line" =~ ^\[([0-9]+)/([0-9]+)\] ]]; then
        done_n=${BASH_REMATCH[1]} total=${BASH_REMATCH[2]}
        if [ $((done_n * 10 / total)) -gt "$shown" ]; then
          shown=$((done_n * 10 / total))
          echo "dev-up: build: $done_n/$total"
        fi
      fi
    done
  }
  build_status=${PIPESTATUS[0]}
  set -e
  [ "$build_status" -eq 0 ] || fail_with_log build "$run/logs/build.log"
  phase_done build "(log: $run/logs/build.log)"
fi

phase_start
stop_all
mkdir -p "$run/pids"
bash scripts/gen-certs.sh "$run/certs" >"$run/logs/certs.log" 2>&1 ||
  fail_with_log certs "$run/logs/certs.log"
certs="$run/certs"
phase_done certs "($certs)"

phase_start
start() {  # start NAME CMD...: background process, log in .run/logs/NAME.log
  local name=$1
  shift
  "$@" >"$run/logs/$name.log" 2>&1 &
  echo $! >"$run/pids/$name"
}

wait_for_log() {  # wait_for_log NAME TEXT: up to 10 s
  for _ in $(seq 100); do
    if grep -q "$2" "$run/logs/$1.log" 2>/dev/null; then return 0; fi
    if ! kill -0 "$(cat "$run/pids/$1")" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "$1 did not start; its log:" >&2
  cat "$run/logs/$1.log" >&2
  stop_all
  exit 1
}

start demo-origin "$bin/demo-origin" 18080
wait_for_log demo-origin "listening"
start proxy-server "$bin/proxy-server" --mode=grpc --uds-name="$run/konn.sock" --server-port=0 \
  --agent-bind-address=127.0.0.1 --agent-port=8091 \
  --cluster-cert="$certs/server.crt" --cluster-key="$certs/server.key" \
  --cluster-ca-cert="$certs/ca.crt" --server-id=dev-server
wait_for_log proxy-server "agent listener"
start proxy-agent "$bin/proxy-agent" --proxy-server-host=127.0.0.1 --proxy-server-port=8091 \
  --ca-cert="$certs/ca.crt" --agent-cert="$certs/agent.crt" --agent-key="$certs/agent.key" \
  --agent-id=dev-agent --agent-identifiers="host=localhost&ipv4=127.0.0.1"
wait_for_log proxy-server "agent connected"

# The gRPC frontend socket the proxy-server already serves (kube-apiserver's GRPC egress): socks5
# opens one Proxy stream per CONNECT on one shared connection.
start socks5 "$bin/socks5" --bind-address=127.0.0.1 --port=1080 \
  --health-port=8096 --health-bind-address=127.0.0.1 \
  --konnectivity-address="unix:$run/konn.sock" --konnectivity-mode=grpc
wait_for_log socks5 "health listening"

# The kubeconfig of the apiserver kubeproxy-http fronts ($run/kubeconfig, no proxy) and one per
# proxy, the same with a proxy-url: kubectl (Go) never sends a loopback apiserver through
# HTTPS_PROXY, but it always uses a kubeconfig's proxy-url.
kube_args=(--port=8001 --health-port=8097)
if [ "$use_fake_apiserver" = 0 ]; then
  kubectl config view --minify --flatten --raw >"$run/kubeconfig"
  cluster=$(kubectl --kubeconfig="$run/kubeconfig" config view -o jsonpath='{.clusters[0].name}')
  for variant in socks5=socks5://127.0.0.1:1080 socks5-name=socks5://127.0.0.1:1080 \
                 connect=http://127.0.0.1:8002; do
    cp "$run/kubeconfig" "$run/kubeconfig-${variant%%=*}"
    # One field: `config set-cluster` would also reset insecure-skip-tls-verify.
    kubectl --kubeconfig="$run/kubeconfig-${variant%%=*}" config set \
      "clusters.$cluster.proxy-url" "${variant#*=}" >/dev/null
  done
  api_note="your kubeconfig context $(kubectl config current-context)"
else
  start fake-apiserver "$bin/kubeproxy-fake-apiserver" --cert "$certs/server.crt" \
    --key "$certs/server.key" --token dev-token --watch-open
  wait_for_log fake-apiserver "listening on"
  api=$(sed -n 's/^listening on //p' "$run/logs/fake-apiserver.log" | head -1)
  api_port=${api##*:}
  # Written here rather than with kubectl, which a fresh machine may not have yet. Each line:
  # file suffix ("." for none), apiserver host, proxy-url. "-socks5-name" names the apiserver
  # "localhost": Go's SOCKS5 client sends a name unresolved, so the agent resolves it (what
  # socks5h:// means to curl; kubectl refuses the socks5h scheme in a proxy-url).
  while read -r suffix host proxy_url; do
    [ "$suffix" != . ] || suffix=
    cat >"$run/kubeconfig$suffix" <<KC
apiVersion: v1
kind: Config
clusters:
- name: dev
  cluster:
    server: https://$host:$api_port
    certificate-authority: $certs/ca.crt${proxy_url:+
    proxy-url: $proxy_url}
users:
- {name: dev, user: {token: dev-token}}
contexts:
- {name: dev, context: {cluster: dev, user: dev, namespace: default}}
current-context: dev
KC
  done <<VARIANTS
. 127.0.0.1
-socks5 127.0.0.1 socks5://127.0.0.1:1080
-socks5-name localhost socks5://127.0.0.1:1080
-connect 127.0.0.1 http://127.0.0.1:8002
VARIANTS
  api_note="a local fake apiserver at https://$api (no kubeconfig context found)"
fi
kube_args+=(--kubeconfig="$run/kubeconfig")
start kubeproxy-http "$bin/kubeproxy-http" "${kube_args[@]}"
wait_for_log kubeproxy-http "Starting to serve on"
start kubeproxy-connect "$bin/kubeproxy-http" --mode=connect --address=127.0.0.1 --port=8002 \
  --health-port=8098 --health-bind-address=127.0.0.1 \
  --konnectivity-address="unix:$run/konn.sock" --konnectivity-mode=grpc
wait_for_log kubeproxy-connect "Starting to serve on"

phase_done start "(logs: $run/logs)"
stop_cmd="${KONN_DEV_UP_RUN_DIR:+KONN_DEV_UP_RUN_DIR=$run }scripts/dev-up.sh stop"

cat <<TRY

konn is up (logs in $run/logs, stop with: $stop_cmd)

  Ports it opened:
    demo-origin     127.0.0.1:18080
    proxy-server    unix:$run/konn.sock (frontend), 127.0.0.1:8091 (agents, mTLS),
                    *:8092 (health), 127.0.0.1:8095 (admin)
    proxy-agent     *:8093 (health), 127.0.0.1:8094 (admin)
    socks5          127.0.0.1:1080 (SOCKS5), 127.0.0.1:8096 (health/metrics)
    kubeproxy-http  127.0.0.1:8001 (proxy), 127.0.0.1:8097 (health/metrics, asked for)
    kubeproxy-http  127.0.0.1:8002 (CONNECT), 127.0.0.1:8098 (health/metrics)

  Fetch a page through the Konnectivity tunnel (client -> proxy-server -> agent -> demo-origin):
    $bin/proxy-test-client --proxy-uds=$run/konn.sock \\
        --request-host=127.0.0.1 --request-port=18080 --request-path=/hello

  Pipe bytes through a tunnel:
    printf 'GET /piped HTTP/1.0\\r\\n\\r\\n' | $bin/proxy-test-client --proxy-uds=$run/konn.sock \\
        --request-host=127.0.0.1 --request-port=18080 --pipe

  Through SOCKS5 and the tunnel (curl -> socks5 -> proxy-server -> agent -> demo-origin; the name
  goes unresolved to the agent, as HTTPS_PROXY=socks5h://... does):
    curl --socks5-hostname 127.0.0.1:1080 http://localhost:18080/socks

  kubectl through socks5 and the tunnel (kubectl -> socks5 -> proxy-server -> agent -> apiserver;
  the apiserver: $api_note); the kubeconfig's cluster has proxy-url: socks5://127.0.0.1:1080:
    kubectl --kubeconfig=$run/kubeconfig-socks5 get pods
    kubectl --kubeconfig=$run/kubeconfig-socks5 version
    kubectl --kubeconfig=$run/kubeconfig-socks5 get --raw /api/v1/namespaces
    kubectl --kubeconfig=$run/kubeconfig-socks5 get pods --watch --request-timeout=3s

  The same with the apiserver named "localhost": kubectl's SOCKS5 client sends the name
  unresolved, so the agent resolves it (what socks5h:// means to curl; kubectl's proxy-url takes
  socks5:// only). And through kubeproxy-http's CONNECT mode, also into the tunnel (proxy-url:
  http://127.0.0.1:8002):
    kubectl --kubeconfig=$run/kubeconfig-socks5-name get namespaces
    kubectl --kubeconfig=$run/kubeconfig-connect get pods

  The tunnel's dials (one per connection kubectl opened through socks5 or CONNECT):
    curl -s http://127.0.0.1:8095/metrics | grep ^konnectivity_network_proxy_server_dial_duration_seconds_count

  socks5's counters (sessions, replies by code, bytes, dial failures by reason):
    curl -s http://127.0.0.1:8096/metrics | grep ^konn_socks5

  kubectl proxy, the konn way (kubeproxy-http in front of the same apiserver):
    curl http://127.0.0.1:8001/api/
    kubectl --server=http://127.0.0.1:8001 get pods

  kubeproxy-http's counters (requests, responses by code, bytes):
    curl -s http://127.0.0.1:8097/metrics | grep ^konn_kubeproxy
TRY
