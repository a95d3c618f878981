#!/usr/bin/env bash
# Installs the Debian bookworm packages konn needs to build, test and run locally.
# Idempotent: when every package is already installed it does nothing (no apt-get update).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  ccache  # cmake/KonnCcache.cmake: a second build, or a second clone, recompiles only what changed
  libasio-dev libssl-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libyaml-cpp-dev libspdlog-dev libfmt-dev catch2
  libcli11-dev nlohmann-json3-dev prometheus-cpp-dev
  libhttp-parser-dev libc-ares-dev libnghttp2-dev
  openssl curl nodejs npm wrk
  dpkg-dev file  # cpack -G DEB: dpkg-shlibdeps computes the packages' Depends (tests/manifests)
  squid tinyproxy  # egress-proxy e2e tests: the agent through both, started by the test on loopback
  # tests/go/build.sh: the Go test peers and h2spec, built offline from Debian's Go sources
  golang-go golang-google-grpc-dev golang-github-golang-protobuf-1-5-dev golang-google-protobuf-dev
  protoc-gen-go protoc-gen-go-grpc golang-golang-x-net-dev golang-github-spf13-cobra-dev
  golang-github-fatih-color-dev socat  # socat: h2spec reaches the unix-socket frontend through it
  # scripts/kube-apiserver.sh: the kube tests' kube-apiserver and etcd (started by the tests)
  etcd-server golang-github-modern-go-reflect2-dev
  # tests/monitoring: promtool and a Prometheus server started by the test on loopback (its
  # system service stays off); tests/integration/status: headless Chromium renders /status.
  prometheus chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# nodejs/npm may come from elsewhere on the machine; only ask apt for them when absent.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  filtered=()
  for p in "${missing[@]}"; do
    [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p")
  done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi

# promtool (the HA tests check /metrics with it, tests/monitoring the rules) comes with the
# `prometheus` package above. On a machine where that package cannot be installed, this takes the
# one binary out of it, as the HA tests need (tests/monitoring still fails without the server).
install_promtool() {
  command -v promtool >/dev/null 2>&1 && return 0
  local tmp sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  tmp=$(mktemp -d)
  if (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) &&
     dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/promtool &&
     "${sudo_cmd[@]}" install -m 0755 "$tmp/usr/bin/promtool" /usr/local/bin/promtool; then
    echo "setup: installed /usr/local/bin/promtool"
  else
    echo "setup: promtool not installed (the tests use their own Prometheus text parser)"
  fi
  rm -rf "$tmp"
}

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all packages present"
  install_promtool
  exit 0
fi

echo "setup: installing ${missing[*]}"
# squid, tinyproxy, etcd and prometheus are started by the tests themselves: their system
# services stay off.
bash "$(dirname "$0")/apt-install.sh" --services="squid tinyproxy etcd prometheus" "${missing[@]}"
install_promtool
