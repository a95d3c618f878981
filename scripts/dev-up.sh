#!/usr/bin/env bash
# Starts the konn suite locally on built-in defaults, for a first look:
#   installs missing Debian packages, builds the release binaries, generates development
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
#   then prints what to try. Logs and pids go to .run/. Stop everything with: scripts/dev-up.sh stop
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
run="$root/.run"
# The same optimised build the test suite uses (preset ci), so the two README commands share it.
bin="$root/build/ci/bin"

stop_all() {
  if [ -d "$run/pids" ]; then
    for f in "$run"/pids/*; do
      [ -e "$f" ] || continue
      kill "$(cat "$f")" 2>/dev/null || true
      rm -f "$f"
    done
  fi
}

if [ "${1:-}" = "stop" ]; then
  stop_all
  echo "konn dev suite stopped"
  exit 0
fi

bash scripts/setup.sh
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake --preset ci "${launcher[@]}" >/dev/null
targets=(proxy-server proxy-agent proxy-test-client demo-origin socks5 kubeproxy-http
         kubeproxy-fake-apiserver)
echo "building ${targets[*]} (optimised) ..."
cmake --build --preset ci -j "$(nproc)" --target "${targets[@]}"

stop_all
mkdir -p "$run/pids" "$run/logs"
bash scripts/gen-certs.sh "$run/certs"
certs="$run/certs"

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

kube_args=(--port=8001 --health-port=8097)
if kubectl config current-context >/dev/null 2>&1; then
  kube_note="in front of your kubeconfig context $(kubectl config current-context)"
else
  start fake-apiserver "$bin/kubeproxy-fake-apiserver" --cert "$certs/server.crt" \
    --key "$certs/server.key" --token dev-token
  wait_for_log fake-apiserver "listening on"
  api=$(sed -n 's/^listening on //p' "$run/logs/fake-apiserver.log" | head -1)
  cat >"$run/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- {name: dev, cluster: {server: "https://$api", certificate-authority: $certs/ca.crt}}
users:
- {name: dev, user: {token: dev-token}}
contexts:
- {name: dev, context: {cluster: dev, user: dev}}
current-context: dev
KC
  kube_args+=(--kubeconfig="$run/kubeconfig")
  kube_note="in front of a local fake apiserver at https://$api (no kubeconfig context found)"
fi
start kubeproxy-http "$bin/kubeproxy-http" "${kube_args[@]}"
wait_for_log kubeproxy-http "Starting to serve on"

cat <<TRY

konn is up (logs in .run/logs, stop with: scripts/dev-up.sh stop)

  Ports it opened:
    demo-origin     127.0.0.1:18080
    proxy-server    unix:$run/konn.sock (frontend), 127.0.0.1:8091 (agents, mTLS),
                    *:8092 (health), 127.0.0.1:8095 (admin)
    proxy-agent     *:8093 (health), 127.0.0.1:8094 (admin)
    socks5          127.0.0.1:1080 (SOCKS5), 127.0.0.1:8096 (health/metrics)
    kubeproxy-http  127.0.0.1:8001 (proxy), 127.0.0.1:8097 (health/metrics, asked for)

  Fetch a page through the Konnectivity tunnel (client -> proxy-server -> agent -> demo-origin):
    $bin/proxy-test-client --proxy-uds=$run/konn.sock \\
        --request-host=127.0.0.1 --request-port=18080 --request-path=/hello

  Pipe bytes through a tunnel:
    printf 'GET /piped HTTP/1.0\\r\\n\\r\\n' | $bin/proxy-test-client --proxy-uds=$run/konn.sock \\
        --request-host=127.0.0.1 --request-port=18080 --pipe

  Through SOCKS5 and the tunnel (curl -> socks5 -> proxy-server -> agent -> demo-origin; the name
  goes unresolved to the agent, as HTTPS_PROXY=socks5h://... does):
    curl --socks5-hostname 127.0.0.1:1080 http://localhost:18080/socks

  socks5's counters (sessions, replies by code, bytes, dial failures by reason):
    curl -s http://127.0.0.1:8096/metrics | grep ^konn_socks5

  kubeproxy-http's counters (requests, responses by code, bytes):
    curl -s http://127.0.0.1:8097/metrics | grep ^konn_kubeproxy

  kubectl proxy, the konn way ($kube_note):
    curl http://127.0.0.1:8001/api/
TRY
