#!/usr/bin/env bash
# Installs Debian packages without starting any service they ship: a policy-rc.d forbids
# service starts during the install, and the named services are then stopped and kept from
# starting at boot (a machine with systemd ignores policy-rc.d on some paths). The tests and the
# benchmark start squid, tinyproxy, dante and iperf3 by hand on loopback, with their own configs.
# Usage: scripts/apt-install.sh --services="squid tinyproxy" PACKAGE...
set -euo pipefail
services=()
if [[ "${1:-}" == --services=* ]]; then
  read -r -a services <<<"${1#--services=}"
  shift
fi
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
if [ "$#" -gt 0 ]; then
  policy=/usr/sbin/policy-rc.d
  had_policy=0
  [ -e "$policy" ] && had_policy=1
  if [ "$had_policy" -eq 0 ]; then
    # Exit status 101: "action forbidden", so invoke-rc.d starts no service during the install.
    printf '#!/bin/sh\nexit 101\n' | "${sudo_cmd[@]}" tee "$policy" >/dev/null
    "${sudo_cmd[@]}" chmod +x "$policy"
  fi
  restore() { [ "$had_policy" -eq 1 ] || "${sudo_cmd[@]}" rm -f "$policy"; }
  trap restore EXIT
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
    --no-install-recommends "$@" >&2
  restore
  trap - EXIT
fi
# Only the packages' own services are touched.
for s in "${services[@]+"${services[@]}"}"; do
  if command -v systemctl >/dev/null 2>&1; then
    # Works without a running systemd too (it only removes the wants/ symlinks).
    "${sudo_cmd[@]}" systemctl disable "$s" >/dev/null 2>&1 || true
  fi
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    "${sudo_cmd[@]}" systemctl stop "$s" >/dev/null 2>&1 || true
  elif [ -x "/etc/init.d/$s" ]; then
    command -v update-rc.d >/dev/null 2>&1 && "${sudo_cmd[@]}" update-rc.d "$s" disable >/dev/null 2>&1
    "${sudo_cmd[@]}" "/etc/init.d/$s" stop >/dev/null 2>&1 || true
  fi
done
