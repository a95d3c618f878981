#!/usr/bin/env bash
# kubeproxy-http vs `kubectl proxy`, against the same TLS fake apiserver, in one run:
#  - small requests: wrk (keep-alive) on a PodList GET, requests/s and p99 latency;
#  - large download: curl of DOWNLOAD_MB through each proxy and directly to the apiserver.
# Prints one table with ratios. Loopback only; every step is bounded in time.
# Env: BUILD_DIR (default build/release, built if missing), DURATION (10s), CONNECTIONS (16),
#      THREADS (1), DOWNLOAD_MB (1024).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$src/build/release}
duration=${DURATION:-10s}
conns=${CONNECTIONS:-16}
threads=${THREADS:-1}
mb=${DOWNLOAD_MB:-1024}
for tool in wrk curl kubectl openssl; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool not found (scripts/setup.sh installs it)"; exit 1; }
done
if [ ! -x "$build/bin/kubeproxy-http" ] || [ ! -x "$build/bin/kubeproxy-fake-apiserver" ]; then
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target kubeproxy-http kubeproxy-fake-apiserver -j2 >/dev/null
fi
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT INT TERM

wait_for() {  # file pattern -> the matching line, within 10 s
  for _ in $(seq 200); do
    if line=$(grep -m1 "$2" "$1" 2>/dev/null); then echo "$line"; return 0; fi
    sleep 0.05
  done
  echo "run.sh: timed out waiting for '$2' in $1" >&2; cat "$1" >&2; return 1
}

"$src/tests/integration/kubeproxy/gen_certs.sh" "$work"
"$build/bin/kubeproxy-fake-apiserver" --cert "$work/server.crt" --key "$work/server.key" \
  --token bench-token > "$work/api.out" 2>&1 &
pids+=($!)
api=$(wait_for "$work/api.out" "listening on" | sed 's/^listening on //')
cat > "$work/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- {name: fake, cluster: {server: "https://$api", certificate-authority: ca.crt}}
users:
- {name: bench, user: {token: bench-token}}
contexts:
- {name: fake, context: {cluster: fake, user: bench}}
current-context: fake
KC

"$build/bin/kubeproxy-http" --port=0 --kubeconfig="$work/kubeconfig" --log-level=warn \
  > "$work/ours.out" 2> "$work/ours.err" &
pids+=($!)
ours=$(wait_for "$work/ours.out" "Starting to serve on" | sed 's/^Starting to serve on //')
kubectl proxy --port=0 --kubeconfig="$work/kubeconfig" > "$work/kubectl.out" 2> "$work/kubectl.err" &
pids+=($!)
theirs=$(wait_for "$work/kubectl.out" "Starting to serve on" | sed 's/^Starting to serve on //')

path=/api/v1/namespaces/default/pods
small() {  # url -> "rps p99_ms"
  curl -sf -o /dev/null "$1"  # warm the upstream connection
  timeout 120 wrk -t"$threads" -c"$conns" -d"$duration" --latency "$1" > "$work/wrk.txt"
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$work/wrk.txt")
  p99=$(awk '$1 == "99%" {v=$2; if (v ~ /us$/) {sub(/us$/,"",v); v=v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v)} else if (v ~ /s$/) {sub(/s$/,"",v); v=v*1000}; print v}' "$work/wrk.txt")
  errors=$(awk '/Non-2xx|Socket errors/ {print}' "$work/wrk.txt")
  [ -z "$errors" ] || echo "  (wrk: $errors)" >&2
  echo "$rps $p99"
}
download() {  # curl args... -> MB/s
  timeout 300 curl -sf -o /dev/null -w '%{speed_download}' "$@" | awk '{printf "%.1f", $1/1048576}'
}

echo "fake apiserver https://$api  kubeproxy-http $ours  kubectl proxy $theirs" >&2
echo "small requests: wrk -t$threads -c$conns -d$duration GET $path" >&2
read -r ours_rps ours_p99 < <(small "http://$ours$path")
read -r kc_rps kc_p99 < <(small "http://$theirs$path")
bytes=$((mb * 1024 * 1024))
echo "download: $mb MiB" >&2
ours_dl=$(download "http://$ours/download?bytes=$bytes")
kc_dl=$(download "http://$theirs/download?bytes=$bytes")
direct_dl=$(download --cacert "$work/ca.crt" -H "Authorization: Bearer bench-token" \
  "https://$api/download?bytes=$bytes")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
printf '\n| metric | kubeproxy-http | kubectl proxy | ratio (ours/kubectl) |\n|---|---|---|---|\n'
printf '| small GET requests/s | %s | %s | %s |\n' "$ours_rps" "$kc_rps" "$(ratio "$ours_rps" "$kc_rps")"
printf '| small GET p99 latency (ms) | %s | %s | %s |\n' "$ours_p99" "$kc_p99" "$(ratio "$ours_p99" "$kc_p99")"
printf '| %s MiB download (MiB/s) | %s | %s | %s |\n' "$mb" "$ours_dl" "$kc_dl" "$(ratio "$ours_dl" "$kc_dl")"
printf '| same download direct to the apiserver (MiB/s) | %s | | ours/direct %s |\n' "$direct_dl" "$(ratio "$ours_dl" "$direct_dl")"
