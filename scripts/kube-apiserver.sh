#!/usr/bin/env bash
# Builds a real kube-apiserver v1.20.2 (for tests/integration/kube) from Debian bookworm's
# `kubernetes` source package when it is missing, into a cache outside the clone keyed by
# version, and prints the binary's path on its last line. Idempotent: a present binary is only
# printed. Facts it follows (GOPATH mode, generated OpenAPI, reflect2 1.0.2, ldflags, tags):
# /work/shared/reference/kube-apiserver.md, summarised in tests/integration/kube/README.md.
#   scripts/kube-apiserver.sh            build when missing, print the path
#   scripts/kube-apiserver.sh --path     print the path only (nothing is built)
# Environment: KONN_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/konn).
set -euo pipefail

version=v1.20.2
git_commit=faecb196815e248d3ecfb03c680a4507229c2a56
build_date=2021-01-13T13:20:00Z  # the v1.20.2 release's
debian_version=1.20.5+really1.20.2
tarball=kubernetes_${debian_version}.orig.tar.gz
tarball_sha256=b83c0780efb182d928dc63d46488a847f161f04e40a94b96bf5247dd671ecdfc

cache=${KONN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/konn}
dir=$cache/kube-apiserver/$version
bin=$dir/kube-apiserver

if [ "${1:-}" = --path ]; then
  echo "$bin"
  exit 0
fi

phase_start=0
phase() { phase_start=$(date +%s); phase_name=$1; }
phase_done() {
  echo "kube-apiserver: $phase_name ($(( $(date +%s) - phase_start )) s)${1:+ $1}" >&2
}

# The packages every run needs (the tests start etcd themselves: its service stays off).
phase "packages"
pkgs=(golang-go etcd-server golang-github-modern-go-reflect2-dev dpkg-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  # stdout carries only the binary's path (scripts/test.sh reads its last line).
  bash "$(dirname "$0")/apt-install.sh" --services=etcd "${missing[@]}" >&2
  phase_done "installed ${missing[*]}"
else
  phase_done "present"
fi

if [ -x "$bin" ]; then
  echo "kube-apiserver: cached" >&2
  echo "$bin"
  exit 0
fi

mkdir -p "$dir"
# One build at a time per cache (scripts/test.sh and a developer may start it together).
exec 9>"$dir/.lock"
flock 9
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

# The source tarball, through a private apt configuration: the machine's own Debian sources as
# deb-src, with lists and archives of its own, so the machine's apt state stays untouched.
phase "source"
src_dir=$dir/source
if ! [ -f "$src_dir/$tarball" ] ||
   ! echo "$tarball_sha256  $src_dir/$tarball" | sha256sum --check --status; then
  apt_dir=$dir/apt
  mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" \
    "$src_dir"
  rm -f "$apt_dir/sources.list.d/"*
  sources=/etc/apt/sources.list.d/debian.sources
  if [ -f "$sources" ]; then
    sed 's/^Types:.*/Types: deb-src/' "$sources" >"$apt_dir/sources.list.d/debian-src.sources"
  elif grep -qs '^deb ' /etc/apt/sources.list; then  # the one-line format of older installs
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >"$apt_dir/sources.list.d/debian-src.list"
  else
    echo "kube-apiserver: no Debian sources in $sources or /etc/apt/sources.list" >&2
    exit 1
  fi
  apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
    -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1")
  apt-get "${apt_opts[@]}" -qq update >&2
  (cd "$src_dir" && apt-get "${apt_opts[@]}" -qq source --download-only kubernetes >&2)
  echo "$tarball_sha256  $src_dir/$tarball" | sha256sum --check --status || {
    echo "kube-apiserver: $src_dir/$tarball: sha256 mismatch (want $tarball_sha256)" >&2
    exit 1
  }
  phase_done "downloaded $tarball"
else
  phase_done "cached $tarball"
fi

# GOPATH mode: Go 1.19 refuses v1.20's go.mod, and vendor/ holds every dependency.
phase "extract"
gopath=$dir/gopath
tree=$gopath/src/k8s.io/kubernetes
rm -rf "$gopath"
mkdir -p "$tree"
tar -xzf "$src_dir/$tarball" -C "$tree" --strip-components=1
# reflect2 1.0.1 faults on Go >= 1.18 at the first custom-resource create; Debian's 1.0.2 works.
rm -rf "$tree/vendor/github.com/modern-go/reflect2"
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$tree/vendor/github.com/modern-go/reflect2"
rm -rf "$tree/vendor/github.com/modern-go/reflect2/.git"
phase_done

export GOPATH=$gopath GO111MODULE=off CGO_ENABLED=0 GOFLAGS= GOPROXY=off
export GOCACHE=$cache/go-build
cd "$tree"

# pkg/generated/openapi/zz_generated.openapi.go is made by `make`, not shipped: openapi-gen over
# every package whose Go files carry +k8s:openapi-gen= (staging packages through vendor/).
phase "openapi-gen"
mkdir -p "$dir/tools"
go build -o "$dir/tools/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
mapfile -t input_dirs < <(
  grep -rl --include='*.go' -e '+k8s:openapi-gen=' pkg cmd plugin vendor 2>/dev/null |
    grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' |
    xargs -n1 dirname | sort -u
)
# vendor/k8s.io/* are symlinks into staging/: grep -r does not follow them, so add them here.
mapfile -t staging_dirs < <(
  cd staging/src &&
    grep -rl --include='*.go' -e '+k8s:openapi-gen=' k8s.io |
    grep -v -e '^k8s.io/code-generator/' -e '^k8s.io/sample-apiserver/' |
    xargs -n1 dirname | sort -u | sed 's|^|vendor/|'
)
inputs=$(printf 'k8s.io/kubernetes/%s\n' "${input_dirs[@]}" "${staging_dirs[@]}" | sort -u | paste -sd,)
count=$(tr ',' '\n' <<<"$inputs" | wc -l)
"$dir/tools/openapi-gen" -i "$inputs" -p k8s.io/kubernetes/pkg/generated/openapi \
  -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
  -o "$gopath/src" -r "$dir/openapi-violations.report" >&2
if ! diff -q "$dir/openapi-violations.report" api/api-rules/violation_exceptions.list >/dev/null; then
  echo "kube-apiserver: warning: the openapi rule-violation report differs from" \
    "api/api-rules/violation_exceptions.list ($count input packages)" >&2
fi
phase_done "$count packages"

phase "go build"
pkgv=k8s.io/kubernetes/vendor/k8s.io
ldflags=""
for p in client-go/pkg component-base; do
  ldflags+=" -X $pkgv/$p/version.gitVersion=$version"
  ldflags+=" -X $pkgv/$p/version.gitCommit=$git_commit"
  ldflags+=" -X $pkgv/$p/version.gitTreeState=clean"
  ldflags+=" -X $pkgv/$p/version.gitMajor=1"
  ldflags+=" -X $pkgv/$p/version.gitMinor=20"
  ldflags+=" -X $pkgv/$p/version.buildDate=$build_date"
done
go build -tags selinux,notest -ldflags "-s -w$ldflags" -o "$bin.tmp" ./cmd/kube-apiserver
mv "$bin.tmp" "$bin"
phase_done "$(du -h "$bin" | cut -f1)"
"$bin" --version >&2
echo "$bin"
