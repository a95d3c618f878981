#!/usr/bin/env bash
# Builds konn-go-client offline from Debian's Go packages (GOPATH mode, no module download):
# golang-go, golang-google-grpc-dev, golang-github-golang-protobuf-1-5-dev,
# golang-google-protobuf-dev, protoc-gen-go, protoc-gen-go-grpc (installed when missing).
# The ProxyService stubs are generated from proto/konnectivity/client.proto at build time.
#   bench/goclient/build.sh OUTPUT_BINARY
set -euo pipefail
out=${1:?usage: build.sh OUTPUT_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
pkgs=(golang-go golang-google-grpc-dev golang-github-golang-protobuf-1-5-dev
  golang-google-protobuf-dev protoc-gen-go protoc-gen-go-grpc)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  echo "goclient: installing ${missing[*]}" >&2
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
fi
gopath=$(mktemp -d)
trap 'rm -rf "$gopath"' EXIT
pkg=$gopath/src/konnbench
mkdir -p "$pkg/konnectivity" "$pkg/goclient"
protoc -I "$src/proto" --go_out="$pkg" --go_opt=paths=source_relative \
  --go_opt=Mkonnectivity/client.proto=konnbench/konnectivity \
  --go-grpc_out="$pkg" --go-grpc_opt=paths=source_relative \
  --go-grpc_opt=Mkonnectivity/client.proto=konnbench/konnectivity konnectivity/client.proto
cp "$here/main.go" "$pkg/goclient/"
# GOPATH mode: our package first, then Debian's sources; no network, no module cache.
cd "$pkg/goclient"
GO111MODULE=off GOPATH="$gopath:/usr/share/gocode" GOCACHE="${GOCACHE:-$src/build/go-cache}" \
  GOFLAGS= go build -o "$out" .
