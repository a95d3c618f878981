#!/usr/bin/env bash
# Starts kubeproxy-http on 127.0.0.1:8001 (override with PORT=...) in front of the current
# kubeconfig when kubectl has a current context, otherwise in front of the test fake apiserver
# (TLS, token auth) with a throwaway CA. Builds the two binaries first if needed. Ctrl-C stops all.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$src/build/release}
port=${PORT:-8001}
if [ ! -x "$build/bin/kubeproxy-http" ] || [ ! -x "$build/bin/kubeproxy-fake-apiserver" ]; then
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target kubeproxy-http kubeproxy-fake-apiserver -j2 >/dev/null
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM

args=(--port="$port")
if kubectl config current-context >/dev/null 2>&1; then
  echo "kubeproxy-http: in front of your current kubeconfig context ($(kubectl config current-context))"
else
  work=$(mktemp -d)
  "$src/tests/integration/kubeproxy/gen_certs.sh" "$work"
  "$build/bin/kubeproxy-fake-apiserver" --cert "$work/server.crt" --key "$work/server.key" \
    --token local-token > "$work/apiserver.out" &
  pids+=($!)
  for _ in $(seq 100); do grep -q listening "$work/apiserver.out" 2>/dev/null && break; sleep 0.05; done
  api=$(sed -n 's/^listening on //p' "$work/apiserver.out")
  cat > "$work/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- {name: fake, cluster: {server: "https://$api", certificate-authority: ca.crt}}
users:
- {name: local, user: {token: local-token}}
contexts:
- {name: fake, context: {cluster: fake, user: local}}
current-context: fake
KC
  echo "kubeproxy-http: no kubeconfig context found; in front of the fake apiserver at https://$api"
  args+=(--kubeconfig="$work/kubeconfig")
fi
"$build/bin/kubeproxy-http" "${args[@]}" &
pids+=($!)
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.05; done
echo "curl http://127.0.0.1:$port/api/"
wait "${pids[-1]}"
