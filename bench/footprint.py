#!/usr/bin/env python3
"""What each daemon costs a node when idle, beside its anchor (issue 42), started by
bench/footprint.sh.

Every daemon and its anchor run on loopback at the same time (run_all.py's Launcher starts them
as the benchmark does): konn's proxy-server and proxy-agent beside upstream ANP's (v0.30.4,
--upstream-bin), socks5 beside dante and microsocks, kubeproxy-http beside `kubectl proxy`. Each
gets the same traffic, one target after the other: --dials tunnels opened (--concurrency at a time, 32), held,
then closed (`konn-loadgen hold`, an HTTP GET through each for kubeproxy-http and kubectl proxy),
then --mb MiB down and up (`konn-loadgen bulk`; a curl download for the kubectl-proxy pair).
Then every process is left idle --idle seconds, and this reads, per process (its whole tree for
dante's forked children):
  RSS, Pss, Private_Dirty   /proc/PID/smaps_rollup (KiB summed over the tree)
  threads                   /proc/PID/status Threads (summed over the tree)
  fds                       open descriptors, /proc/PID/fd (summed over the tree)
  libs                      distinct shared objects in /proc/PID/maps (of the root process)
  gRPC+Abseil               RSS of the mappings of libgrpc*, libgpr, libabsl_*, libupb,
                            libaddress_sorting, libre2 (what dropping gRPC C++ would take off)
and prints one table with konn / anchor ratios. --detail also prints, per konn process, where
its RSS is (smaps grouped: each library's text and data, heap, thread stacks, other anonymous).
Everything is stopped on exit, Ctrl-C or SIGTERM.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_all  # noqa: E402  (Launcher, Processes, tree: the benchmark's own start-up)

# konn target -> (its processes to report, anchor targets)
PAIRS = {
    "agent": ("konn-grpc", "agent", ["anp-grpc"]),
    "server": ("konn-grpc", "server", ["anp-grpc"]),
    "socks5": ("konn-socks5", "socks5", ["dante", "microsocks"]),
    "kubeproxy-http": ("kubeproxy-http", "kubeproxy-http", ["kubectl-proxy"]),
}
GRPC_LIB = re.compile(r"/lib(grpc|gpr|absl_|upb|address_sorting|re2)[^/]*\.so")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def read_rollup(pid):
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    return out


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def mappings(pid):
    """[(name, {field: kB})] from /proc/PID/smaps; name is the path or [heap]/[stack]/anon."""
    out, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                name = head[5] if len(head) > 5 else "[anon]"
                cur = {"perms": head[1]}
                out.append((name, cur))
            elif len(head) == 3 and head[2] == "kB" and cur is not None:
                cur[head[0].rstrip(":")] = int(head[1])
    return out


def libs_of(pid):
    with open(f"/proc/{pid}/maps") as f:
        paths = {line.split()[5] for line in f if len(line.split()) > 5}
    return sorted(p for p in paths if re.search(r"\.so(\.|$)", os.path.basename(p)))


def measure(pid):
    """The figures of one process tree."""
    r = {"rss": 0, "pss": 0, "private_dirty": 0, "anon": 0, "threads": 0, "processes": 0,
         "fds": 0}
    for p in run_all.tree(pid):
        try:
            roll = read_rollup(p)
            r["threads"] += threads_of(p)
        except OSError:
            continue
        r["processes"] += 1
        try:
            r["fds"] += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            pass
        r["rss"] += roll.get("Rss", 0)
        r["pss"] += roll.get("Pss", 0)
        r["private_dirty"] += roll.get("Private_Dirty", 0)
        r["anon"] += roll.get("Anonymous", 0)
    libs = libs_of(pid)
    r["libs"] = len(libs)
    grpc = [m for m in mappings(pid) if GRPC_LIB.search(m[0])]
    r["grpc_libs"] = len({name for name, _ in grpc})
    r["grpc_rss"] = sum(m.get("Rss", 0) for _, m in grpc)
    r["grpc_pss"] = sum(m.get("Pss", 0) for _, m in grpc)
    return r


def thread_names(pid):
    names = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return names


def detail(pid):
    """RSS (KiB) by kind of mapping, largest first."""
    groups = {}
    maps = mappings(pid)
    # A thread stack is an anonymous rw mapping just above its guard page (---p).
    for i, (name, m) in enumerate(maps):
        if name.startswith("/"):
            kind = "text" if "x" in m["perms"] else "data"
            key = f"{os.path.basename(name)} ({kind})"
            if GRPC_LIB.search(name):
                key = f"gRPC+Abseil libraries ({kind})"
        elif name == "[anon]":
            prev = maps[i - 1][1] if i else None
            if prev is not None and maps[i - 1][0] == "[anon]" and prev["perms"] == "---p" \
                    and m["perms"].startswith("rw") and prev.get("Size", 0) <= 64:
                key = "thread stacks"
            elif m["perms"] == "---p":
                key = "reserved (---p)"
            else:
                key = "anonymous (malloc arenas, mmaps)"
        else:
            key = name
        g = groups.setdefault(key, [0, 0, 0])
        g[0] += m.get("Rss", 0)
        g[1] += m.get("Private_Dirty", 0)
        g[2] += 1
    return sorted(((k, *v) for k, v in groups.items()), key=lambda x: -x[1])


def malloc_stats(proc):
    """glibc's malloc_stats() of a running process: gdb calls it, it writes to the process's
    stderr (its log), from which the new lines are printed."""
    before = len(proc.log_text())
    subprocess.run(["gdb", "-p", str(proc.pid), "-batch", "-ex", "call (void)malloc_stats()"],
                   capture_output=True, timeout=60)
    time.sleep(0.2)
    log(f"{proc.name} malloc_stats():\n{proc.log_text()[before:].strip()}")


def traffic(args, launcher, target):
    """The same traffic through every target: --dials tunnels held then closed, --mb down/up."""
    bindir = launcher.bin
    if target.group == "kubectl-proxy":
        via, dest = "direct", target.via.split("//")[1]
        flags = ["--http-get=/api"]
    else:
        via, dest = target.via, target.dest or launcher.dest
        flags = []
    argv = [f"{bindir}/konn-loadgen", "hold", f"--via={via}", f"--target={dest}",
            f"--count={args.dials}", f"--concurrency={args.concurrency}", *flags]
    holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = run_all.read_line(holder, args.step_timeout)
        if '"ready"' not in line:
            raise run_all.Failure(f"hold: {line} {holder.stderr.read()[-2000:]}")
        holder.stdin.write("\n")
        holder.stdin.flush()
        line = run_all.read_line(holder, args.step_timeout)
        if '"closed"' not in line:
            raise run_all.Failure(f"hold close: {line} {holder.stderr.read()[-2000:]}")
        holder.wait(args.step_timeout)
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
    nbytes = args.mb * 2**20
    if target.group == "kubectl-proxy":
        r = subprocess.run(["curl", "-sf", "-o", "/dev/null", "-w", "%{size_download}",
                            f"{target.via}/download?bytes={nbytes}"], capture_output=True,
                           text=True, timeout=args.step_timeout)
        if r.returncode != 0 or int(r.stdout or 0) != nbytes:
            raise run_all.Failure(f"curl download: exit {r.returncode} got {r.stdout}")
        return
    for direction in ("down", "up"):
        r = subprocess.run([f"{bindir}/konn-loadgen", "bulk", f"--via={via}", f"--target={dest}",
                            f"--direction={direction}", "--streams=1", f"--bytes={nbytes}"],
                           capture_output=True, text=True, timeout=args.step_timeout)
        if r.returncode != 0:
            raise run_all.Failure(f"bulk {direction}: {r.stderr[-2000:]}")


def mib(kib):
    return f"{kib / 1024:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="konn's binaries (build/ci/bin)")
    ap.add_argument("--src", required=True, help="the source tree (certificates scripts)")
    ap.add_argument("--upstream-bin", default=os.path.expanduser(
        "~/.cache/konn-upstream/v0.30.4/bin"), help="upstream ANP's server and agent")
    ap.add_argument("--only", default=",".join(PAIRS),
                    help=f"comma-separated among {', '.join(PAIRS)}")
    ap.add_argument("--dials", type=int, default=500, help="tunnels opened and closed")
    ap.add_argument("--concurrency", type=int, default=32, help="tunnels opened at a time")
    ap.add_argument("--mb", type=int, default=8, help="MiB down and up through each")
    ap.add_argument("--idle", type=float, default=6.0, help="seconds idle before measuring")
    ap.add_argument("--step-timeout", type=float, default=120)
    ap.add_argument("--detail", action="store_true", help="where each konn process's RSS is")
    ap.add_argument("--json", help="also write the figures there")
    ap.add_argument("--keep-work", action="store_true")
    ap.add_argument("--malloc-stats", action="store_true",
                    help="also print glibc's malloc_stats() of each konn process (gdb attaches)")
    args = ap.parse_args()
    only = [o for o in args.only.split(",") if o]
    for o in only:
        if o not in PAIRS:
            ap.error(f"--only: unknown {o!r} (known: {', '.join(PAIRS)})")
    args.upstream_bin = args.upstream_bin if os.path.isdir(args.upstream_bin) else None
    args.go_client = None

    work = tempfile.mkdtemp(prefix="konn-footprint-")
    os.chmod(work, 0o755)
    procs = run_all.Processes(work)

    def on_signal(signum, _):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    failures, results = [], {}
    try:
        launcher = run_all.Launcher(args, procs, work, args.bin, args.src)
        names = []
        for o in only:
            konn, _, anchors = PAIRS[o]
            for n in [konn, *anchors]:
                if n in run_all.ANP_TARGETS and not args.upstream_bin:
                    log(f"footprint: no upstream binaries at {args.upstream_bin}: {n} left out")
                    continue
                if n not in names:
                    names.append(n)
        targets = {}
        for n in names:
            log(f"starting {n}")
            try:
                targets[n] = launcher.start(n)
            except run_all.Failure as e:
                failures.append(f"{n} / start: {e}")
        for n, t in targets.items():
            log(f"traffic through {n}: {args.dials} tunnels held and closed, {args.mb} MiB down"
                " and up")
            try:
                traffic(args, launcher, t)
            except (run_all.Failure, subprocess.TimeoutExpired) as e:
                failures.append(f"{n} / traffic: {e}")
        log(f"idle {args.idle} s")
        time.sleep(args.idle)
        for n, t in targets.items():
            for label, p in t.daemons:
                if not p.alive():
                    failures.append(f"{n}: {label} exited")
                    continue
                results[(n, label)] = measure(p.pid)
                if args.malloc_stats and n.startswith(("konn", "kubeproxy")):
                    malloc_stats(p)
                if args.detail and n.startswith(("konn", "kubeproxy")):
                    results[(n, label)]["detail"] = detail(p.pid)
                    results[(n, label)]["thread_names"] = thread_names(p.pid)
    except KeyboardInterrupt:
        failures.append("interrupted")
    finally:
        procs.stop_all()
        if not args.keep_work:
            subprocess.run(["rm", "-rf", work])
        else:
            log(f"logs in {work}")

    print("\n| daemon | process | RSS MiB | Pss MiB | Private_Dirty MiB | threads | fds | libs "
          "| gRPC+Abseil libs, RSS MiB | RSS konn/this |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for o in only:
        konn, label, anchors = PAIRS[o]
        mine = results.get((konn, label))
        rows = [(konn, label, mine)]
        for a in anchors:
            for (n, lab), r in results.items():
                if n == a and (lab == label or n not in run_all.ANP_TARGETS):
                    rows.append((n, lab, r))
        for n, lab, r in rows:
            if r is None:
                continue
            ratio = f"{mine['rss'] / r['rss']:.2f}" if mine and r is not mine and r["rss"] else ""
            procs_note = f" ({r['processes']} processes)" if r["processes"] > 1 else ""
            grpc = f"{r['grpc_libs']}, {mib(r['grpc_rss'])}" if r["grpc_libs"] else "0"
            print(f"| {o} | {n} {lab}{procs_note} | {mib(r['rss'])} | {mib(r['pss'])} "
                  f"| {mib(r['private_dirty'])} | {r['threads']} | {r['fds']} | {r['libs']} | {grpc} "
                  f"| {ratio} |")
    if args.detail:
        for (n, lab), r in results.items():
            if "detail" not in r:
                continue
            print(f"\n{n} {lab}: threads {', '.join(r['thread_names'])}; RSS by mapping (KiB)\n"
                  "| mapping | RSS | Private_Dirty | count |")
            print("|---|---|---|---|")
            for key, rss, dirty, count in r["detail"][:25]:
                if rss:
                    print(f"| {key} | {rss} | {dirty} | {count} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{n}/{lab}": r for (n, lab), r in results.items()}, f, indent=1)
    for f in failures:
        log("FAILED " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
