#!/usr/bin/env bash
# Installs the benchmark's peers from Debian when missing (dante-server, microsocks, tinyproxy,
# squid, haproxy, iperf3, wrk, curl, python3) without leaving any of their system services running
# (scripts/apt-install.sh; bench/run-all.sh starts each peer by hand on loopback).
# kubectl must already be on the machine (scripts/setup.sh installs it).
set -euo pipefail
declare -A pkg_of=([danted]=dante-server [microsocks]=microsocks [tinyproxy]=tinyproxy
  [squid]=squid [haproxy]=haproxy [iperf3]=iperf3 [wrk]=wrk [curl]=curl [python3]=python3)
need=()
for tool in "${!pkg_of[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || need+=("${pkg_of[$tool]}")
done
if [ "${#need[@]}" -gt 0 ]; then echo "install-peers: installing ${need[*]}" >&2; fi
# No service of theirs is left running, whether installed now or before.
bash "$(dirname "$0")/../scripts/apt-install.sh" --services="danted squid tinyproxy haproxy iperf3" \
  "${need[@]+"${need[@]}"}"
command -v kubectl >/dev/null 2>&1 || { echo "install-peers: kubectl not found" >&2; exit 1; }
