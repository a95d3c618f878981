#!/usr/bin/env python3
"""socks5 and kubeproxy-http through a proxy-server, two builds side by side in one run.

One proxy-server (--mode=grpc, frontend on a unix socket) and one proxy-agent (mTLS) from
--bin; socks5 and kubeproxy-http (--mode=connect) with --konnectivity-address=unix:... from each
of --before and --after, both running, their passes alternating (which goes first swaps every
round). konn-loadgen (from --bin) measures, through each daemon:
  dials 1x: open a tunnel, one 64-byte echo, close, one dialer at a time (dials/s, p50);
  dials 8x: the same with 8 dialers (dials/s);
  rr: 64-byte round trips on one tunnel (p50, p99);
and /proc gives, over the dials 1x run, the daemon's CPU (user + system, every thread) and
context switches (voluntary + involuntary, every thread) per dial, and its thread count once it
carried traffic. Prints one Markdown table of medians over --rounds with after/before ratios;
--json=FILE writes every figure.

    bench/konnectivity_client.py --before=/tmp/before/src/build/ci/bin --after=build/ci/bin

On a machine others load too, run it under `chrt -r 1` (the lowest real-time priority, which its
children inherit): the figures are then ours, not the other processes'. See docs/performance.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_all import CLK_TCK, Failure, OpProfile, Processes, free_port, log, wait_port  # noqa: E402

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def proc_cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def proc_switches(pid):
    """Context switches of the process's live threads (run_all's per-thread sampler)."""
    return sum(cs for _, cs, _ in OpProfile.threads(pid).values())


def proc_threads(pid):
    return len(os.listdir(f"/proc/{pid}/task"))


def loadgen(bindir, *argv):
    r = subprocess.run([f"{bindir}/konn-loadgen", *argv], capture_output=True, text=True,
                       timeout=120, check=False)
    if r.returncode != 0:
        raise Failure(f"konn-loadgen {' '.join(argv)}: {r.stderr.strip() or r.stdout.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def start_stack(procs, bindir, work):
    certs = os.path.join(work, "certs")
    subprocess.run(["bash", os.path.join(SRC, "scripts/gen-certs.sh"), certs], check=True,
                   stdout=subprocess.DEVNULL)
    sock = os.path.join(work, "frontend.sock")
    server, m = procs.start(
        "proxy-server",
        [f"{bindir}/proxy-server", "--mode=grpc", f"--uds-name={sock}",
         "--delete-existing-uds-file", "--server-port=0", "--agent-bind-address=127.0.0.1",
         "--agent-port=0", "--health-port=0", "--admin-port=0",
         f"--cluster-cert={certs}/server.crt", f"--cluster-key={certs}/server.key",
         f"--cluster-ca-cert={certs}/ca.crt"],
        ready=r"agent listener .* on 127\.0\.0\.1:(\d+)")
    agent, _ = procs.start(
        "proxy-agent",
        [f"{bindir}/proxy-agent", "--proxy-server-host=127.0.0.1",
         f"--proxy-server-port={m.group(1)}", f"--ca-cert={certs}/ca.crt",
         f"--agent-cert={certs}/agent.crt", f"--agent-key={certs}/agent.key",
         "--agent-id=bench", "--health-server-port=0", "--admin-server-port=0"])
    deadline = time.time() + 20
    while "agent connected" not in server.log_text():
        if time.time() > deadline or not agent.alive():
            raise Failure(f"agent never connected\n{agent.log_text()[-2000:]}")
        time.sleep(0.05)
    _, m = procs.start("destination", [f"{bindir}/konn-loadgen", "serve", "--port=0"],
                       ready=r"listening on (127\.0\.0\.1:\d+)")
    return sock, m.group(1)


def start_daemon(procs, kind, bindir, sock, tag, workers=0):
    upstream = [f"--konnectivity-address=unix:{sock}", "--konnectivity-mode=grpc",
                "--log-level=warn", "--health-port=0"]
    if workers > 0:
        upstream.append(f"--workers={workers}")
    if kind == "socks5":
        port = free_port()
        p, _ = procs.start(tag, [f"{bindir}/socks5", "--bind-address=127.0.0.1",
                                 f"--port={port}", *upstream])
        wait_port(port)
        return p, f"socks5://127.0.0.1:{port}"
    p, m = procs.start(tag, [f"{bindir}/kubeproxy-http", "--mode=connect", "--port=0",
                             *upstream],
                       ready=r"Starting to serve on (127\.0\.0\.1:\d+)")
    return p, f"connect://{m.group(1)}"


def measure(args, p, via, dest):
    """One pass of every workload through the daemon `p` (listening at `via`)."""
    common = [f"--via={via}", f"--target={dest}"]
    ticks, switches = proc_cpu_ticks(p.pid), proc_switches(p.pid)
    d1 = loadgen(args.bin, "dials", *common, "--concurrency=1", "--request=true",
                 f"--duration={args.duration}s")
    ticks = proc_cpu_ticks(p.pid) - ticks
    switches = proc_switches(p.pid) - switches
    d8 = loadgen(args.bin, "dials", *common, "--concurrency=8", "--request=true",
                 f"--duration={args.duration}s")
    rr = loadgen(args.bin, "rr", *common, "--tunnels=1", "--size=64",
                 f"--duration={args.duration}s")
    return {
        "dials 1x /s": d1["rate"],
        "dial 1x p50 us": d1["p50_us"],
        "dials 8x /s": d8["rate"],
        "rr p50 us": rr["p50_us"],
        "rr p99 us": rr["p99_us"],
        "CPU us/dial": ticks * 1e6 / CLK_TCK / max(1, d1["dials"]),
        "switches/dial": switches / max(1, d1["dials"]),
        "threads": proc_threads(p.pid),
    }


LOWER_IS_BETTER = ("dial 1x p50 us", "rr p50 us", "rr p99 us", "CPU us/dial", "switches/dial",
                   "threads")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="bin dir of the build measured first")
    ap.add_argument("--after", required=True, help="bin dir of the build compared with it")
    ap.add_argument("--bin", help="proxy-server, proxy-agent, konn-loadgen (default: --after)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--duration", type=float, default=1)
    ap.add_argument("--only", default="socks5,kubeproxy-http")
    ap.add_argument("--workers", type=int, default=0, help="--workers of both daemons (0: theirs)")
    ap.add_argument("--json")
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin or args.after)
    builds = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    kinds = args.only.split(",")
    work = tempfile.mkdtemp(prefix="konn-kclient-bench.")
    procs = Processes(work)
    results = {k: {v: [] for v in builds} for k in kinds}
    try:
        sock, dest = start_stack(procs, args.bin, work)
        for kind in kinds:
            # Both builds run side by side; their passes alternate (which goes first swaps every
            # round), so a busy moment of the machine falls on both.
            daemons = {v: start_daemon(procs, kind, builds[v], sock, f"{kind}-{v}", args.workers)
                       for v in builds}
            for v, (p, via) in daemons.items():
                loadgen(args.bin, "dials", f"--via={via}", f"--target={dest}", "--concurrency=1",
                        "--request=true", "--duration=1s")  # warm: connections, allocator
            for rnd in range(args.rounds):
                order = list(builds) if rnd % 2 == 0 else list(reversed(builds))
                for variant in order:
                    p, via = daemons[variant]
                    r = measure(args, p, via, dest)
                    log(f"round {rnd + 1} {kind} {variant}: " +
                        ", ".join(f"{k} {v:.0f}" for k, v in r.items()))
                    results[kind][variant].append(r)
            for p, _ in daemons.values():
                procs.stop(p)
                procs.procs.remove(p)
    except Failure as e:
        log(f"FAILED: {e}\n(logs in {work})")
        return 1
    finally:
        procs.stop_all()
    print("| daemon | figure | before | after | after/before |")
    print("|---|---|---|---|---|")
    for kind in kinds:
        for metric in results[kind]["before"][0]:
            med = {v: statistics.median(r[metric] for r in results[kind][v]) for v in builds}
            ratio = med["after"] / med["before"] if med["before"] else float("nan")
            print(f"| {kind} | {metric} | {med['before']:.1f} | {med['after']:.1f} | "
                  f"{ratio:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
