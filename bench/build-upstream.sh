#!/usr/bin/env bash
# Builds upstream apiserver-network-proxy (kubernetes-sigs, tag v0.30.4) for the benchmark's
# anp-grpc and anp-connect targets (issue 19): its server, agent and test-client, offline from
# the vendor/ directory of its source, with Debian's golang-go (installed when missing).
#
#   bench/build-upstream.sh --src=DIR [--out=DIR] [--tag=v0.30.4]
#
# --src is a checkout of the upstream repository or a bare git directory holding the tag (the
#   tag is extracted with git archive). Nothing is downloaded: get one where GitHub is reachable
#   with `git clone --bare https://github.com/kubernetes-sigs/apiserver-network-proxy` and pass
#   its path.
# --out is where the binaries go, outside this repository (default
#   ~/.cache/konn-upstream/<tag>/bin); then: bench/run-all.sh --upstream-bin=<out>.
#
# One edit is made to the extracted copy: Debian's Go is 1.19, and pkg/server/backend_manager.go
# calls slices.Contains (Go 1.21); the call becomes a loop and the import goes. No upstream code
# or binary is written inside this repository.
set -euo pipefail
tag=v0.30.4
src=
out=
for a in "$@"; do
  case $a in
    --src=*) src=${a#--src=} ;;
    --out=*) out=${a#--out=} ;;
    --tag=*) tag=${a#--tag=} ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-upstream.sh: unknown argument $a (see --help)" >&2; exit 2 ;;
  esac
done
out=${out:-${XDG_CACHE_HOME:-$HOME/.cache}/konn-upstream/$tag/bin}
if [ -z "$src" ] || [ ! -d "$src" ]; then
  cat >&2 <<EOF
build-upstream.sh: no upstream source (--src=DIR). Get one where GitHub is reachable:
  git clone --bare https://github.com/kubernetes-sigs/apiserver-network-proxy anp.git
then: bench/build-upstream.sh --src=anp.git   (a normal checkout holding tag $tag works too)
EOF
  exit 2
fi
src=$(cd "$src" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
case "$out/" in
  "$repo"/*) echo "build-upstream.sh: --out must be outside the repository ($repo)" >&2; exit 2 ;;
esac

if ! command -v go >/dev/null 2>&1; then
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  echo "build-upstream.sh: installing golang-go" >&2
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    golang-go >&2
fi

# The tagged tree, from a bare git directory, a checkout's .git, or a checkout as it is.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if git --git-dir="$src" rev-parse --verify -q "$tag^{commit}" >/dev/null 2>&1; then
  git --git-dir="$src" archive "$tag" | tar -x -C "$work"
elif git --git-dir="$src/.git" rev-parse --verify -q "$tag^{commit}" >/dev/null 2>&1; then
  git --git-dir="$src/.git" archive "$tag" | tar -x -C "$work"
elif [ -d "$src/vendor" ] && [ -d "$src/cmd/server" ]; then
  echo "build-upstream.sh: $src has no git tag $tag; building the tree as it is" >&2
  cp -a "$src/." "$work/"
else
  echo "build-upstream.sh: $src holds neither tag $tag nor an upstream tree with vendor/" >&2
  exit 2
fi

# Go 1.19 has no "slices" package: one call, one import.
f=$work/pkg/server/backend_manager.go
if grep -q 'slices\.Contains' "$f"; then
  perl -0pi -e 's/^\t"slices"\n//m;
    s/return slices\.Contains\(idTypes, idType\)/for _, t := range idTypes {\n\t\tif t == idType {\n\t\t\treturn true\n\t\t}\n\t}\n\treturn false/' "$f"
  if grep -q 'slices\.' "$f"; then
    echo "build-upstream.sh: $f still uses slices (edit did not apply)" >&2
    exit 1
  fi
fi

mkdir -p "$out"
cd "$work"
echo "build-upstream.sh: building $tag with $(go version | cut -d' ' -f3) into $out" >&2
GOFLAGS=-mod=vendor GOPROXY=off \
  GOCACHE="${GOCACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/konn-upstream/go-build}" \
  go build -o "$out/" ./cmd/server ./cmd/agent ./cmd/test-client
ls -l "$out/server" "$out/agent" "$out/test-client" >&2
echo "$out"
