#!/usr/bin/env bash
# Installs the benchmark's peers from Debian when missing (dante-server, microsocks, tinyproxy,
# squid, iperf3, wrk, curl, python3) without leaving any of their system services running:
# a policy-rc.d forbids service starts during the install, and the units the packages ship are
# stopped and disabled afterwards (bench/run-all.sh starts each peer by hand on loopback).
# kubectl must already be on the machine (scripts/setup.sh installs it).
set -euo pipefail
declare -A pkg_of=([danted]=dante-server [microsocks]=microsocks [tinyproxy]=tinyproxy
  [squid]=squid [iperf3]=iperf3 [wrk]=wrk [curl]=curl [python3]=python3)
need=()
for tool in "${!pkg_of[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || need+=("${pkg_of[$tool]}")
done
services=(danted squid tinyproxy iperf3)
if [ "${#need[@]}" -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  echo "install-peers: installing ${need[*]}" >&2
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
    --no-install-recommends "${need[@]}" >&2
  restore
  trap - EXIT
fi
# Whatever started anyway (a machine with systemd ignores policy-rc.d for some paths): stop it
# and keep it from starting at boot. Only the packages' own services are touched.
for s in "${services[@]}"; do
  if command -v systemctl >/dev/null 2>&1; then
    # Works without a running systemd too (it only removes the wants/ symlinks).
    systemctl disable "$s" >/dev/null 2>&1 || true
  fi
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl stop "$s" >/dev/null 2>&1 || true
  elif [ -x "/etc/init.d/$s" ]; then
    command -v update-rc.d >/dev/null 2>&1 && update-rc.d "$s" disable >/dev/null 2>&1
    "/etc/init.d/$s" stop >/dev/null 2>&1 || true
  fi
done
command -v kubectl >/dev/null 2>&1 || { echo "install-peers: kubectl not found" >&2; exit 1; }
