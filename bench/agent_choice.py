#!/usr/bin/env python3
"""The proxy-server's agent choice under one slow agent (bench/agent-choice.sh builds and runs it).

Three agents serve one proxy-server; the third reaches it through a relay that delays every byte
by --delay-ms in each direction (a slow or congested link: its dials, requests and answers all
arrive late; several values give one table each). A webhook-like workload (konn-loadgen dials --request: --concurrency dialers, each
opening a tunnel, sending one small request, reading the echo and closing, in a loop) runs
through the server for --duration seconds, after a warm-up. Per configuration the table gives the
share of the dials each agent took (counted on the agents' own /metrics,
dial_duration_seconds_count) and the workload's rate, p50 and p99.

Configurations, all in one run on the same machine, destination and relay:
  anp            upstream v0.30.4's server and agents (uniform random choice)
  konn-random    konn, --agent-choice=random (upstream's choice)
  konn-least     konn, --agent-choice=least-loaded (the default)

    bench/agent-choice.sh [--delay-ms=20,200] [--duration=10] [--concurrency=16] [--runs=1]
        [--upstream-bin=~/.cache/konn-upstream/v0.30.4/bin] [--json=FILE]
"""
import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_all import Failure, Processes, free_port, log, wait_port  # noqa: E402

DIALS = "konnectivity_network_proxy_agent_dial_duration_seconds_count"
CONNECTED = "konnectivity_network_proxy_agent_open_server_connections"


# ---------------------------------------------------------------------------------------------
# The slow link: a TCP relay that holds every chunk --delay-ms before passing it on, in both
# directions, without limiting throughput (chunks are pipelined, each leaves at its own time).

async def _pump(reader, writer, delay):
    queue = asyncio.Queue()

    async def feed():
        while True:
            data = await reader.read(65536)
            await queue.put((time.monotonic() + delay, data))
            if not data:
                return

    feeder = asyncio.ensure_future(feed())
    try:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        feeder.cancel()


async def _relay(listen_port, to_port, delay):
    async def serve(cr, cw):
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", to_port)
        except OSError:
            cw.close()
            return
        await asyncio.gather(_pump(cr, uw, delay), _pump(ur, cw, delay), return_exceptions=True)
        for w in (cw, uw):
            w.close()

    server = await asyncio.start_server(serve, "127.0.0.1", listen_port)
    print(f"relay listening on 127.0.0.1:{listen_port}", flush=True)
    async with server:
        await server.serve_forever()


def relay_main(argv):
    ap = argparse.ArgumentParser(prog="agent_choice.py relay")
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--to", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, required=True)
    a = ap.parse_args(argv)
    asyncio.run(_relay(a.listen, a.to, a.delay_ms / 1000.0))


# ---------------------------------------------------------------------------------------------
# One configuration: a server, three agents (the last behind the relay)

def metric(port, name):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    total = None
    for line in text.splitlines():
        m = re.match(re.escape(name) + r"(\{[^}]*\})?\s+(\S+)", line)
        if m:
            total = (total or 0) + float(m.group(2))
    return total


AGENTS = ("fast-1", "fast-2", "slow")


def start_fleet(kind, procs, work, args, tag, delay_ms):
    """Starts the server and the three agents; returns (frontend socket, {agent: health port})."""
    certs = os.path.join(work, "certs")
    sock = os.path.join(work, f"{tag}.sock")
    agent_port, health = free_port(), free_port()
    if kind == "anp":
        ub = args.upstream_bin
        server_argv = [f"{ub}/server", "--mode=grpc", f"--uds-name={sock}",
                       "--delete-existing-uds-file", "--server-port=0",
                       "--agent-bind-address=127.0.0.1", f"--agent-port={agent_port}",
                       "--health-bind-address=127.0.0.1", f"--health-port={health}",
                       "--admin-bind-address=127.0.0.1", f"--admin-port={free_port()}",
                       f"--cluster-cert={certs}/server.crt", f"--cluster-key={certs}/server.key",
                       f"--cluster-ca-cert={certs}/ca.crt"]
    else:
        choice = {"konn-random": "random", "konn-least": "least-loaded"}[kind]
        server_argv = [f"{args.bin}/proxy-server", "--mode=grpc", f"--uds-name={sock}",
                       "--delete-existing-uds-file", "--server-port=0",
                       "--agent-bind-address=127.0.0.1", f"--agent-port={agent_port}",
                       f"--health-port={health}", "--admin-port=0",
                       f"--cluster-cert={certs}/server.crt", f"--cluster-key={certs}/server.key",
                       f"--cluster-ca-cert={certs}/ca.crt", f"--agent-choice={choice}"]
    procs.start(f"{tag}-server", server_argv)
    wait_port(agent_port)
    relay_port = free_port()
    procs.start(f"{tag}-relay", [sys.executable, os.path.abspath(__file__), "relay",
                                 f"--listen={relay_port}", f"--to={agent_port}",
                                 f"--delay-ms={delay_ms}"],
                ready=r"relay listening")
    ports = {}
    for name in AGENTS:
        port = relay_port if name == "slow" else agent_port
        hp = free_port()
        ports[name] = hp
        common = ["--proxy-server-host=127.0.0.1", f"--proxy-server-port={port}",
                  f"--ca-cert={certs}/ca.crt", f"--agent-cert={certs}/agent.crt",
                  f"--agent-key={certs}/agent.key", f"--agent-id={name}"]
        if kind == "anp":
            argv = [f"{args.upstream_bin}/agent", *common, "--health-server-host=127.0.0.1",
                    f"--health-server-port={hp}", "--admin-bind-address=127.0.0.1",
                    f"--admin-server-port={free_port()}"]
        else:
            argv = [f"{args.bin}/proxy-agent", *common, f"--health-server-port={hp}",
                    "--admin-server-port=0"]
        procs.start(f"{tag}-agent-{name}", argv)
    deadline = time.time() + 30
    while not all(metric(p, CONNECTED) == 1 for p in ports.values()):
        if time.time() > deadline:
            raise Failure(f"{tag}: the agents never all connected")
        time.sleep(0.1)
    return sock, ports


def loadgen(args, sock, dest, seconds):
    argv = [f"{args.bin}/konn-loadgen", "dials", f"--via=grpc+unix://{sock}", f"--target={dest}",
            f"--concurrency={args.concurrency}", "--request=true", f"--duration={seconds}s"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120)
    if r.returncode != 0:
        raise Failure(f"{' '.join(argv)}\n{r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure(kind, args, work, dest, run, delay_ms):
    procs = Processes(work)
    tag = f"{kind}.{delay_ms:g}ms.{run}"
    try:
        sock, ports = start_fleet(kind, procs, work, args, tag, delay_ms)
        loadgen(args, sock, dest, args.warmup)  # connections warm, first dials out of the way
        before = {n: metric(p, DIALS) or 0 for n, p in ports.items()}
        r = loadgen(args, sock, dest, args.duration)
        after = {n: metric(p, DIALS) or 0 for n, p in ports.items()}
        counts = {n: after[n] - before[n] for n in AGENTS}
        total = sum(counts.values()) or 1
        return {"kind": kind, "delay_ms": delay_ms, "run": run, "rate": r["rate"], "p50_us": r["p50_us"],
                "p99_us": r["p99_us"], "dials": r["dials"],
                "share": {n: counts[n] / total for n in AGENTS}, "agent_dials": counts}
    finally:
        procs.stop_all()


LABELS = {"anp": "upstream v0.30.4 (random)", "konn-random": "konn --agent-choice=random",
          "konn-least": "konn --agent-choice=least-loaded"}


def report(results, args, delay_ms):
    print(f"\nthree agents, 'slow' behind a {delay_ms:g} ms (each way) relay; "
          f"konn-loadgen dials --request --concurrency={args.concurrency}, "
          f"{args.duration} s x {args.runs} run(s), medians\n")
    print("| server | dials/s | p50 ms | p99 ms | share fast-1 | share fast-2 | share slow |")
    print("|---|---|---|---|---|---|---|")
    for kind in args.kinds:
        rs = [r for r in results if r["kind"] == kind and r["delay_ms"] == delay_ms]
        if not rs:
            continue
        med = lambda f: statistics.median(f(r) for r in rs)  # noqa: E731
        print(f"| {LABELS[kind]} | {med(lambda r: r['rate']):.0f} | "
              f"{med(lambda r: r['p50_us']) / 1000:.2f} | {med(lambda r: r['p99_us']) / 1000:.2f}"
              + "".join(f" | {100 * med(lambda r, n=n: r['share'][n]):.1f}%" for n in AGENTS)
              + " |")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "relay":
        return relay_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="konn's binaries (build/ci/bin)")
    ap.add_argument("--src", required=True, help="the source tree (scripts/gen-certs.sh)")
    ap.add_argument("--upstream-bin",
                    default=os.path.expanduser("~/.cache/konn-upstream/v0.30.4/bin"),
                    help="upstream's server and agent (empty: konn only)")
    ap.add_argument("--delay-ms", default="20,200",
                    help="the slow agent's one-way delay; a comma-separated list: one table each")
    ap.add_argument("--duration", type=int, default=10, help="measured seconds per run")
    ap.add_argument("--warmup", type=int, default=2, help="seconds of load before measuring")
    ap.add_argument("--concurrency", type=int, default=16, help="concurrent dialers")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", default="", help="write every run's figures here")
    args = ap.parse_args()
    delays = [float(d) for d in args.delay_ms.split(",") if d]
    args.kinds = ["konn-random", "konn-least"]
    if args.upstream_bin:
        for b in ("server", "agent"):
            if not os.access(os.path.join(args.upstream_bin, b), os.X_OK):
                ap.error(f"--upstream-bin: no {b} in {args.upstream_bin} "
                         "(bench/build-upstream.sh; --upstream-bin= to leave upstream out)")
        args.kinds.insert(0, "anp")
    work = tempfile.mkdtemp(prefix="konn-agent-choice-")
    subprocess.run(["bash", os.path.join(args.src, "scripts/gen-certs.sh"),
                    os.path.join(work, "certs")], check=True, stdout=subprocess.DEVNULL)
    procs = Processes(work)
    results = []
    try:
        _, m = procs.start("destination", [f"{args.bin}/konn-loadgen", "serve", "--port=0"],
                           ready=r"listening on (127\.0\.0\.1:\d+)")
        dest = m.group(1)
        for run in range(args.runs):
            for delay in delays:
                for kind in args.kinds:  # interleaved, so a slow moment of the machine hits all
                    log(f"run {run + 1}/{args.runs}, {delay:g} ms: {LABELS[kind]}")
                    results.append(measure(kind, args, work, dest, run, delay))
    finally:
        procs.stop_all()
    for delay in delays:
        report(results, args, delay)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"delays_ms": delays, "concurrency": args.concurrency,
                       "duration_s": args.duration, "results": results}, f, indent=1)
    log(f"logs in {work}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as e:
        log(f"FAILED: {e}")
        sys.exit(1)
