#!/usr/bin/env bash
# Builds konn's Go test peers offline, in GOPATH mode from Debian's Go source packages (no module
# download), into OUTDIR:
#   kas-client      dials proxy-server as kube-apiserver does (kas-client/main.go)
#   upstream-agent  an agent that behaves as upstream's Go agent (upstream-agent/main.go)
#   h2spec          the HTTP/2 conformance suite vendored in tests/third_party/h2spec (v2.6.0)
# The Konnectivity stubs are generated from proto/konnectivity/*.proto at build time. GOCACHE
# is OUTDIR/go-cache unless set. Debian packages: golang-go, golang-google-grpc-dev,
# golang-github-golang-protobuf-1-5-dev, golang-google-protobuf-dev, protoc-gen-go,
# protoc-gen-go-grpc, golang-golang-x-net-dev, golang-github-spf13-cobra-dev,
# golang-github-fatih-color-dev (scripts/setup.sh installs them).
#   tests/go/build.sh OUTDIR
set -euo pipefail
out=${1:?usage: build.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
for tool in go protoc protoc-gen-go protoc-gen-go-grpc; do
  command -v "$tool" >/dev/null || { echo "tests/go/build.sh: $tool missing (scripts/setup.sh installs it)" >&2; exit 1; }
done
gopath=$(mktemp -d)
trap 'rm -rf "$gopath"' EXIT
pkg=$gopath/src/konnpeers
mkdir -p "$pkg/konnectivity" "$gopath/src/github.com/summerwind"
protoc -I "$src/proto" --go_out="$pkg" --go_opt=paths=source_relative \
  --go_opt=Mkonnectivity/client.proto=konnpeers/konnectivity \
  --go_opt=Mkonnectivity/agent.proto=konnpeers/konnectivity \
  --go-grpc_out="$pkg" --go-grpc_opt=paths=source_relative \
  --go-grpc_opt=Mkonnectivity/client.proto=konnpeers/konnectivity \
  --go-grpc_opt=Mkonnectivity/agent.proto=konnpeers/konnectivity \
  konnectivity/client.proto konnectivity/agent.proto
cp -r "$here/kas-client" "$here/upstream-agent" "$pkg/"
cp -r "$src/tests/third_party/h2spec" "$gopath/src/github.com/summerwind/h2spec"
# GOPATH mode: our packages first, then Debian's sources; no network, no module cache.
export GO111MODULE=off GOPATH="$gopath:/usr/share/gocode" GOCACHE="${GOCACHE:-$out/go-cache}" \
  GOFLAGS= GOPROXY=off
(cd "$pkg/kas-client" && go build -o "$out/kas-client.new" . && mv "$out/kas-client.new" "$out/kas-client")
(cd "$pkg/upstream-agent" && go build -o "$out/upstream-agent.new" . && mv "$out/upstream-agent.new" "$out/upstream-agent")
(cd "$gopath/src/github.com/summerwind/h2spec" && go build -o "$out/h2spec.new" ./cmd/h2spec && mv "$out/h2spec.new" "$out/h2spec")
