#!/usr/bin/env bash
# Builds the .deb packages of an existing build tree with CPack (the binaries already built by
# that tree, nothing recompiled), unpacks each with dpkg -x into a scratch root and checks what
# an operator gets: the daemons (runnable, --check-config), their Depends, the manifests.
# Usage: deb_test.sh <build-dir>
set -euo pipefail
build=${1:?usage: deb_test.sh <build-dir>}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/konn-deb.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for tool in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || fail "$tool not found (scripts/setup.sh installs dpkg-dev)"
done
for bin in proxy-server proxy-agent socks5 kubeproxy-http; do
  [ -x "$build/bin/$bin" ] || fail "$build/bin/$bin is not built"
done

(cd "$build" && cpack -G DEB -B "$scratch/out" >"$scratch/cpack.log" 2>&1) ||
  { cat "$scratch/cpack.log" >&2; fail "cpack -G DEB failed"; }

root="$scratch/root"
mkdir -p "$root"
shopt -s nullglob
debs=("$scratch"/out/*.deb)
[ "${#debs[@]}" -gt 0 ] || fail "cpack produced no .deb"
for deb in "${debs[@]}"; do
  echo "package: $(basename "$deb")"
  dpkg-deb --info "$deb" >/dev/null || fail "$deb is not a valid package"
  dpkg -x "$deb" "$root"
done

for daemon in proxy-server proxy-agent socks5 kubeproxy-http; do
  deb=("$scratch"/out/konn-"$daemon"_*.deb)
  [ "${#deb[@]}" -eq 1 ] || fail "no konn-$daemon package"
  depends=$(dpkg-deb -f "${deb[0]}" Depends)
  echo "konn-$daemon Depends: $depends"
  # dpkg-shlibdeps found the shared libraries' packages.
  case "$daemon" in
    proxy-server | proxy-agent) want="libc6 libstdc++6 libssl3 libyaml-cpp libnghttp2 libprotobuf-lite" ;;
    socks5) want="libc6 libstdc++6 libyaml-cpp libc-ares2 libcrypt1" ;;
    kubeproxy-http) want="libc6 libstdc++6 libssl3 libyaml-cpp" ;;
  esac
  for lib in $want; do
    [[ "$depends" == *"$lib"* ]] || fail "konn-$daemon: Depends lacks $lib"
  done
  # No daemon runs gRPC C++ (docs/ARCHITECTURE.md, invariant 26): a node installs no libgrpc.
  [[ "$depends" != *libgrpc* && "$depends" != *libabsl* ]] ||
    fail "konn-$daemon: Depends names gRPC C++ or Abseil"
  # protobuf-lite only (invariant 26): the full runtime is libprotobuf<N>, lite libprotobuf-lite<N>.
  [[ ! "$depends" =~ libprotobuf[0-9] ]] || fail "konn-$daemon: Depends names the full Protobuf"
  dpkg-deb --contents "${deb[0]}" | grep "\./usr/bin/$daemon\$" >/dev/null ||
    fail "konn-$daemon does not hold /usr/bin/$daemon"
  [ -x "$root/usr/bin/$daemon" ] || fail "$daemon missing after dpkg -x"
  "$root/usr/bin/$daemon" --help >/dev/null || fail "the packaged $daemon does not run"
done
# Only the daemons: test helpers and benchmarks stay out of the packages.
for f in "$root"/usr/bin/*; do
  case "$(basename "$f")" in
    proxy-server | proxy-agent | socks5 | kubeproxy-http) ;;
    *) fail "unexpected file in the packages: /usr/bin/$(basename "$f")" ;;
  esac
done
[ -f "$root/usr/share/konn/manifests/overlays/grpc-uds/egress-selector-configuration.yaml" ] ||
  fail "konn-manifests lacks the manifests"
[ -f "$root/usr/share/doc/konn/deploy.md" ] || fail "konn-manifests lacks docs/deploy.md"
echo "deb: ${#debs[@]} packages unpack with the daemons, manifests and docs"
