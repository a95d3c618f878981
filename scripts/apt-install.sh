#!/usr/bin/env bash
# Installs Debian packages without starting any service they ship: a policy-rc.d forbids
# service starts during the install, and the named services are then stopped and kept from
# starting at boot (a machine with systemd ignores policy-rc.d on some paths). The tests and the
# benchmark start squid, tinyproxy, dante and iperf3 by hand on loopback, with their own configs.
# apt runs quietly: its output goes to a log file (KONN_APT_LOG, else a temporary file) shown only
# when it fails. A dpkg/apt lock held by another process (unattended-upgrades on a fresh machine)
# is waited for, saying so once, for up to KONN_APT_LOCK_TIMEOUT seconds (default 900).
# Usage: scripts/apt-install.sh --services="squid tinyproxy" PACKAGE...
set -euo pipefail
services=()
if [[ "${1:-}" == --services=* ]]; then
  read -r -a services <<<"${1#--services=}"
  shift
fi
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

# How long to wait for a dpkg or apt lock another process holds (unattended-upgrades holds
# /var/lib/dpkg/lock-frontend for minutes on a freshly booted machine).
lock_timeout=${KONN_APT_LOCK_TIMEOUT:-900}

# lock_holder FILE: prints "NAME (pid N)" of the process holding a POSIX lock on FILE, or nothing.
# Reads /proc/locks, so it needs neither root nor fuser/lsof.
lock_holder() {
  local inode pid prog
  [ -e "$1" ] || return 0
  inode=$(stat -c %i "$1")
  # /proc/locks lines end "PID MAJOR:MINOR:INODE START END".
  prog='{ split($(NF-2), id, ":"); if (id[3] == ino) { print $(NF-3); exit } }'
  pid=$(awk -v ino="$inode" "$prog" /proc/locks 2>/dev/null)
  [ -n "$pid" ] || return 0
  echo "$(cat "/proc/$pid/comm" 2>/dev/null || echo '?') (pid $pid)"
}

# Waits, saying so once, while another process holds dpkg's or apt's lists lock.
wait_for_dpkg_lock() {
  local waited=0 said=0 holder f
  for (( ; ; )); do
    holder=
    for f in /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock; do
      holder=$(lock_holder "$f")
      [ -z "$holder" ] || break
    done
    [ -n "$holder" ] || return 0
    if [ "$said" -eq 0 ]; then
      echo "apt: waiting for the dpkg lock held by $holder (up to ${lock_timeout}s) ..." >&2
      said=1
    fi
    if [ "$waited" -ge "$lock_timeout" ]; then
      echo "apt: the dpkg lock is still held by $holder after ${lock_timeout}s; giving up" >&2
      exit 100
    fi
    sleep 2
    waited=$((waited + 2))
  done
}

# apt_quiet CMD...: runs an apt command with its output in $apt_log, shown only on failure.
apt_quiet() {
  if ! "$@" >>"$apt_log" 2>&1; then
    echo "apt: '$*' failed; its output ($apt_log):" >&2
    cat "$apt_log" >&2
    exit 100
  fi
}
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
  apt_log=${KONN_APT_LOG:-$(mktemp -t konn-apt.XXXXXX.log)}
  wait_for_dpkg_lock
  # apt's own wait covers a lock taken between that check and apt's start.
  apt_opts=(-o "DPkg::Lock::Timeout=$lock_timeout")
  apt_quiet "${sudo_cmd[@]}" apt-get "${apt_opts[@]}" update
  apt_quiet "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install \
    -y --no-install-recommends "$@"
  restore
  trap - EXIT
  [ -n "${KONN_APT_LOG:-}" ] || rm -f "$apt_log"
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
