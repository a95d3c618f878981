#!/usr/bin/env python3
"""The fleet benchmark (issue 42): konn's proxy-server and upstream's, one after the other in one
run, each driven by konn-fleet-sim (N simulated agents, a frontend load of many tunnels).

Phases, for each server:
  idle      N agents connected: server RSS/Pss per agent, idle CPU per 1 000 agents
  routing   destHost dials to one node among 10, 1 000 and N agents (the fleet grows in three
            steps), and default routing at N: dial p50/p99, server CPU per dial
  tunnels   T tunnels open at once through the frontend (K per HTTP/2 connection): memory per
            tunnel and per frontend connection, time to open, memory given back after close
  storm     SIGKILL the server and start it again: time until every agent is back and routable,
            TLS handshakes/s and the server's CPU, dials during the storm, /healthz latency
  one-agent a real agent (konn's or upstream's) with many tunnels to an echo destination: the
            agent's memory per tunnel
After every phase the server's descriptors are compared with their idle count.

Everything listens and sends on loopback only; every process runs in its own process group and
is killed on exit (signals included). bench/fleet.sh builds and calls this.
"""

import argparse
import atexit
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

PROCS = []  # every Popen started, killed at exit


def kill_all():
    for p in PROCS:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
    for p in PROCS:
        try:
            p.wait(timeout=5)
        except Exception:
            pass


def on_signal(sig, _frame):
    kill_all()
    sys.exit(128 + sig)


atexit.register(kill_all)
for _s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(_s, on_signal)


def log(msg):
    print(f"[fleet {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Failure(Exception):
    pass


def free_port():
    """A free loopback port below the ephemeral range (upstream's server refuses an agent port in
    it, and the fleet's own connections take ports from it)."""
    for _ in range(1000):
        port = random.randint(10000, 30000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise Failure("no free port below the ephemeral range")


def start(argv, log_path, stdin=None, stdout=None):
    f = open(log_path, "ab")
    p = subprocess.Popen(argv, stdout=stdout if stdout is not None else f, stderr=f,
                         stdin=stdin, start_new_session=True)
    PROCS.append(p)
    return p


def stop(p, sig=signal.SIGTERM, wait=10):
    if p is None or p.poll() is not None:
        return
    try:
        os.killpg(p.pid, sig)
        p.wait(timeout=wait)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        p.wait(timeout=5)


def proc_mem(pid):
    """RSS and Pss in KiB (smaps_rollup)."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def proc_run_time(pid):
    """Seconds on a CPU of the process's live threads (/proc/PID/task/*/schedstat, nanoseconds).
    For the idle phase: utime and stime count whole 10 ms ticks, so a server that runs 2 ms in
    30 s can read 30 ms or 0 depending on where the ticks fell."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def proc_cpu(pid):
    """utime + stime in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def proc_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def proc_threads(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return -1


def http_get_ms(url, timeout=5):
    t = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            r.read()
            ok = r.status == 200
    except Exception:
        ok = False
    return ok, (time.monotonic() - t) * 1000


def pct(values, p):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


class Sim:
    """One konn-fleet-sim agents process (maybe several shards); its counters from stdout."""

    def __init__(self, args, work, name, server_port, first, count, shards, ramp):
        self.latest = {}
        self.lock = threading.Lock()
        argv = [f"{args.bin}/konn-fleet-sim", "agents", f"--server=127.0.0.1:{server_port}",
                f"--agents={count}", f"--first-index={first}", f"--shards={shards}",
                f"--ramp={ramp}", "--report-interval=250",
                f"--ca-cert={work}/certs/ca.crt", f"--cert={work}/certs/agent.crt",
                f"--key={work}/certs/agent.key"]
        if args.source_addrs:
            argv.append(f"--source-addrs={args.source_addrs}")
        self.p = start(argv, f"{work}/{name}.log", stdout=subprocess.PIPE)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            try:
                d = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.latest[d.get("shard", 0)] = d

    def total(self, key):
        with self.lock:
            return sum(d.get(key, 0) for d in self.latest.values())

    def stop(self):
        stop(self.p)


class Fleet:
    def __init__(self, sims):
        self.sims = sims

    def total(self, key):
        return sum(s.total(key) for s in self.sims)

    def wait_connected(self, n, timeout, server=None):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.total("connected") >= n:
                return time.monotonic() - t0
            if server is not None and server.p.poll() is not None:
                raise Failure(f"{server.kind}: server exited ({server.p.returncode})")
            time.sleep(0.1)
        return None


class Server:
    """konn's or upstream's proxy-server, frontend on a unix socket, agents over mTLS; fixed ports
    so that a restart keeps them."""

    def __init__(self, kind, args, work):
        self.kind, self.args, self.work = kind, args, work
        self.agent_port, self.health_port, self.admin_port = free_port(), free_port(), free_port()
        self.sock = f"{work}/{kind}.sock"
        self.p = None
        self.generation = 0

    def argv(self, extra=()):
        c = f"{self.work}/certs"
        common = [f"--uds-name={self.sock}", "--delete-existing-uds-file", "--server-port=0",
                  "--agent-bind-address=127.0.0.1", f"--agent-port={self.agent_port}",
                  "--health-bind-address=127.0.0.1", f"--health-port={self.health_port}",
                  f"--admin-port={self.admin_port}", f"--cluster-cert={c}/server.crt",
                  f"--cluster-key={c}/server.key", f"--cluster-ca-cert={c}/ca.crt",
                  "--mode=grpc", "--proxy-strategies=destHost,default"]
        if self.kind == "konn":
            # 100 000 tunnels: past the default --max-frontend-streams (50 000).
            return [f"{self.args.bin}/proxy-server", *common, "--admin-bind-address=127.0.0.1",
                    "--max-frontend-streams=0", "--max-pending-dials=0", *extra]
        return [f"{self.args.upstream_bin}/server", *common, "--admin-bind-address=127.0.0.1",
                "--v=1", *extra]

    def start(self, extra=()):
        self.generation += 1
        self.p = start(self.argv(extra), f"{self.work}/{self.kind}-server.{self.generation}.log")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            if self.p.poll() is not None:
                raise Failure(f"{self.kind} server exited: see {self.work}/"
                              f"{self.kind}-server.{self.generation}.log")
            if self.healthz()[0] and os.path.exists(self.sock):
                try:
                    with socket.create_connection(("127.0.0.1", self.agent_port), timeout=1):
                        return time.monotonic() - t0
                except OSError:
                    pass
            time.sleep(0.05)
        raise Failure(f"{self.kind} server not ready in 20 s")

    def healthz(self):
        return http_get_ms(f"http://127.0.0.1:{self.health_port}/healthz", timeout=5)

    def pid(self):
        return self.p.pid

    def mem(self):
        return proc_mem(self.p.pid)

    def cpu(self):
        return proc_cpu(self.p.pid)

    def run_time(self):
        return proc_run_time(self.p.pid)

    def fds(self):
        return proc_fds(self.p.pid)

    def stop(self, sig=signal.SIGTERM):
        stop(self.p, sig)

    def gauges(self):
        """The server's gauges on its admin /metrics (both servers keep upstream's names), as
        {"name{labels}": value}; {} when unreadable."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics",
                                        timeout=5) as resp:
                text = resp.read().decode("utf-8", "replace")
        except Exception:
            return {}
        kinds, out = {}, {}
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                parts = line.split()
                if len(parts) >= 4:
                    kinds[parts[2]] = parts[3]
                continue
            if not line or line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            name = key.split("{", 1)[0]
            if kinds.get(name) != "gauge" or name.startswith(("process_", "go_")):
                continue
            try:
                out[key] = float(value)
            except ValueError:
                pass
        return out


def gauge_drift(idle, now):
    """The gauges whose value differs from idle (a leak, or a phase not over)."""
    return {k: [idle.get(k), v] for k, v in now.items() if idle.get(k, 0.0) != v}


def frontend(args, server, extra, name, wait_stdin=False, timeout=600):
    argv = [f"{args.bin}/konn-fleet-sim", "frontend", f"--uds={server.sock}", *extra]
    if wait_stdin:
        argv.append("--wait-stdin")
    p = start(argv, f"{server.work}/{name}.log", stdin=subprocess.PIPE if wait_stdin else None,
              stdout=subprocess.PIPE)
    return p


def read_event(p, event, timeout):
    """The next JSON line of `p` whose event is `event`."""
    result = {}

    def reader():
        for line in p.stdout:
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if d.get("event") == event:
                result.update(d)
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        raise Failure(f"frontend: no {event} line within {timeout} s")
    return result


def events_by_name(stdout):
    """konn-fleet-sim's JSON lines, the last of each "event" by its name (other lines skipped)."""
    out = {}
    for line in stdout.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        out[d.get("event")] = d
    return out


def run_frontend(args, server, extra, name, timeout=600):
    p = frontend(args, server, extra, name)
    try:
        stdout, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(p, signal.SIGKILL)
        raise Failure(f"frontend {name} did not finish in {timeout} s")
    return events_by_name(stdout)


def routing(args, server, n_agents, dials, dest_prefix=True):
    cpu0 = server.cpu()
    extra = ["--churn", "--concurrency=1", f"--tunnels={dials}"]
    if dest_prefix:
        extra += ["--dest-prefix=node-", f"--dest-count={n_agents}"]
    else:
        extra += ["--dest=127.0.0.1:80"]
    o = run_frontend(args, server, extra, f"{server.kind}-routing-{n_agents}")["open"]
    cpu = server.cpu() - cpu0
    return {"agents": n_agents, "dials": dials, "opened": o["opened"], "failed": o["failed"],
            "p50_us": o["dial_p50_us"], "p99_us": o["dial_p99_us"],
            "server_cpu_us_per_dial": cpu * 1e6 / max(1, dials),
            "first_error": o.get("first_error", "")}


def settle_fds(server, idle_fds, timeout=15):
    """Waits for the server's descriptors to return to idle_fds; returns the count seen."""
    t0 = time.monotonic()
    n = server.fds()
    while time.monotonic() - t0 < timeout:
        n = server.fds()
        if n <= idle_fds:
            return n
        time.sleep(0.25)
    return n


def run_server(args, work, kind):
    r = {"kind": kind, "fds_after_phase": {}}
    n = args.agents
    server = Server(kind, args, work)
    server.start()
    time.sleep(0.5)
    r["rss_kib_empty"], r["pss_kib_empty"] = server.mem()
    sims = []
    try:
        # The fleet grows in three steps: 10, 1 000, N (routing is measured at each).
        steps = [s for s in (10, 1000) if s < n] + [n]
        first = 0
        dials = args.routing_dials
        r["routing"] = []
        ramp_start = time.monotonic()
        for step in steps:
            count = step - first
            shards = max(1, -(-count // args.agents_per_shard))
            sims.append(Sim(args, work, f"{kind}-sim-{first}", server.agent_port, first, count,
                            shards, args.ramp))
            fleet = Fleet(sims)
            took = fleet.wait_connected(step, args.connect_timeout, server)
            all_connected_at = time.monotonic()
            if took is None:
                # A server that cannot take the fleet in time is measured with what it holds.
                short = fleet.total("connected")
                r.setdefault("short_steps", []).append({"step": step, "connected": short})
                log(f"{kind}: only {short} of {step} agents connected within "
                    f"{args.connect_timeout} s; going on with them")
            else:
                log(f"{kind}: {step} agents connected ({took:.1f} s)")
            if step == 10:
                time.sleep(0.5)
                r["rss_kib_10"], r["pss_kib_10"] = server.mem()
            r["routing"].append(routing(args, server, step, dials))
            log(f"{kind}: routing at {step}: p50 {r['routing'][-1]['p50_us']:.0f} us "
                f"p99 {r['routing'][-1]['p99_us']:.0f} us")
            first = step
        r["connect_all_s"] = time.monotonic() - ramp_start
        fleet = Fleet(sims)
        n = fleet.total("connected")  # the agents the server holds (N unless it fell short)
        r["agents_connected"] = n
        r["routing_default"] = routing(args, server, n, dials, dest_prefix=False)

        # Idle: from 12 s after the last agent connected on (konn's server checks each
        # connection's handshake deadline once, 10 s after accept: work of connecting, not idle).
        time.sleep(max(2.0, 12.0 - (time.monotonic() - all_connected_at)))
        cpu0, t0 = server.run_time(), time.monotonic()
        time.sleep(args.idle_seconds)
        idle_cpu = server.run_time() - cpu0
        r["idle_seconds"] = time.monotonic() - t0
        r["idle_cpu_s"] = idle_cpu
        r["idle_cpu_ms_per_1000_agents"] = idle_cpu * 1000 / (max(1, n) / 1000)
        r["rss_kib_n"], r["pss_kib_n"] = server.mem()
        base = max(1, n - 10 if n > 10 else n)
        r["rss_kib_per_agent"] = (r["rss_kib_n"] - r.get("rss_kib_10", r["rss_kib_empty"])) / base
        r["pss_kib_per_agent"] = (r["pss_kib_n"] - r.get("pss_kib_10", r["pss_kib_empty"])) / base
        r["threads"] = proc_threads(server.pid())
        idle_fds = server.fds()
        r["fds_idle"] = idle_fds
        idle_gauges = server.gauges()
        r["gauges_idle"] = idle_gauges
        r["gauges_drift"] = {}
        log(f"{kind}: idle: {r['rss_kib_per_agent']:.1f} KiB RSS/agent, "
            f"{r['idle_cpu_ms_per_1000_agents']:.1f} ms CPU per 1000 agents over "
            f"{args.idle_seconds} s, {idle_fds} fds")

        # Per frontend connection: one tunnel per connection (kube-apiserver's way), first:
        # a Go heap grown by the large run would take these in without growing.
        k1 = args.conn_tunnels
        rss0, _ = server.mem()
        p = frontend(args, server, [f"--tunnels={k1}", "--per-conn=1", "--concurrency=256"],
                     f"{kind}-tunnels-k1", wait_stdin=True)
        o1 = read_event(p, "open", 300)
        time.sleep(1)
        rss1, _ = server.mem()
        p.stdin.write(b"close\n")
        p.stdin.flush()
        read_event(p, "closed", 120)
        p.stdin.write(b"exit\n")
        p.stdin.flush()
        p.wait(timeout=30)
        per_both = (rss1 - rss0) / max(1, o1["opened"])
        k1_result = {"k1_tunnels": o1["opened"], "k1_open_s": o1["open_s"],
                     "k1_rss_kib_per_tunnel_and_conn": per_both}
        r["fds_after_phase"]["tunnels-k1"] = settle_fds(server, idle_fds)

        # Tunnels: T through K-stream connections, then per-connection cost with K = 1.
        rss0, pss0 = server.mem()
        cpu0 = server.cpu()
        p = frontend(args, server, [f"--tunnels={args.tunnels}", f"--per-conn={args.per_conn}",
                                    "--concurrency=512", "--active=100", "--round-trips=10"],
                     f"{kind}-tunnels", wait_stdin=True)
        o = read_event(p, "open", 900)
        rtt = read_event(p, "rtt", 120)
        time.sleep(1)
        rss1, pss1 = server.mem()
        fds_open = server.fds()
        p.stdin.write(b"close\n")
        p.stdin.flush()
        c = read_event(p, "closed", 120)
        time.sleep(2)
        rss2, pss2 = server.mem()
        p.stdin.write(b"exit\n")
        p.stdin.flush()
        p.wait(timeout=30)
        opened = max(1, o["opened"])
        r["tunnels"] = {
            "tunnels": args.tunnels, "per_conn": args.per_conn, "opened": o["opened"],
            "failed": o["failed"], "open_s": o["open_s"], "connections": o["connections"],
            "dial_p50_us": o["dial_p50_us"], "dial_p99_us": o["dial_p99_us"],
            "rtt_p50_us": rtt.get("rtt_p50_us"), "rtt_p99_us": rtt.get("rtt_p99_us"),
            "rss_kib_per_tunnel": (rss1 - rss0) / opened,
            "pss_kib_per_tunnel": (pss1 - pss0) / opened,
            "rss_kib_given_back": rss1 - rss2, "rss_kib_kept_after_close": rss2 - rss0,
            "closed_clean": c["clean"], "close_s": c["close_s"], "fds_open": fds_open,
            "server_cpu_s": server.cpu() - cpu0, "first_error": o.get("first_error", ""),
        }
        r["tunnels"].update(k1_result)
        r["tunnels"]["rss_kib_per_frontend_conn"] = per_both - r["tunnels"]["rss_kib_per_tunnel"]
        r["fds_after_phase"]["tunnels"] = settle_fds(server, idle_fds)
        r["gauges_drift"]["tunnels"] = gauge_drift(idle_gauges, server.gauges())
        log(f"{kind}: tunnels: {o['opened']} open in {o['open_s']:.1f} s, "
            f"{r['tunnels']['rss_kib_per_tunnel']:.2f} KiB RSS/tunnel, "
            f"{rss1 - rss2} KiB given back")
        # Storm: SIGKILL, restart, every agent back.
        storm = {}
        hz = []
        stop_hz = threading.Event()

        def poll_health():
            while not stop_hz.is_set():
                ok, ms = server.healthz()
                hz.append((ok, ms))
                time.sleep(0.1)

        hs0 = fleet.total("handshakes")
        server.stop(signal.SIGKILL)
        t_kill = time.monotonic()
        storm["restart_s"] = server.start()
        t0 = time.monotonic()
        cpu0 = server.cpu()  # the new process: from zero
        hzt = threading.Thread(target=poll_health, daemon=True)
        hzt.start()
        # Dials during the storm: one every 50 ms, default routing, 30 s backstop.
        dp = frontend(args, server, ["--churn", "--concurrency=64", "--interval=50",
                                     f"--tunnels={int(args.storm_dial_seconds * 20)}",
                                     "--dest=127.0.0.1:80", "--dial-timeout=30000"],
                      f"{kind}-storm-dials")
        back = fleet.wait_connected(n, args.storm_timeout, server)
        t_back = time.monotonic()
        cpu = server.cpu() - cpu0
        hs = fleet.total("handshakes") - hs0
        stop_hz.set()
        hzt.join()
        storm["all_back_s"] = (t_back - t_kill) if back is not None else None
        storm["connected_at_end"] = fleet.total("connected")
        storm["connected_before"] = n
        storm["handshakes"] = hs
        span = max(0.001, t_back - t0)
        storm["handshakes_per_s"] = hs / span
        storm["server_cpu_s"] = cpu
        storm["server_cpu_ms_per_handshake"] = cpu * 1000 / max(1, hs)
        oks = [ms for ok, ms in hz if ok]
        storm["healthz_n"] = len(hz)
        storm["healthz_failed"] = sum(1 for ok, _ in hz if not ok)
        storm["healthz_p99_ms"] = pct(oks, 99)
        storm["healthz_max_ms"] = max(oks) if oks else None
        try:
            out, _ = dp.communicate(timeout=args.storm_dial_seconds + 60)
        except subprocess.TimeoutExpired:
            stop(dp, signal.SIGKILL)
            out = b""
        d = events_by_name(out)
        o = d.get("open", {})
        storm["dials"] = o.get("tunnels")
        storm["dials_ok"] = o.get("opened")
        storm["dials_failed"] = o.get("failed")
        storm["dials_hung"] = o.get("timed_out")
        storm["dial_ok_p99_ms"] = (o.get("dial_p99_us") or 0) / 1000
        storm["dial_failed_p99_ms"] = (o.get("dial_failed_p99_us") or 0) / 1000
        storm["dial_first_error"] = o.get("first_error", "")
        # Routable: destHost dials to random nodes among all.
        rt = routing(args, server, n, min(200, dials))
        storm["routable_ok"] = rt["opened"]
        storm["routable_dials"] = rt["dials"]
        r["storm"] = storm
        r["fds_after_phase"]["storm"] = server.fds()
        # A restarted server starts its gauges afresh: compared with the idle ones all the same.
        r["gauges_drift"]["storm"] = gauge_drift(idle_gauges, server.gauges())
        log(f"{kind}: storm: all back in {storm['all_back_s']} s, {storm['handshakes_per_s']:.0f} "
            f"handshakes/s, {storm['server_cpu_ms_per_handshake']:.2f} ms CPU each, "
            f"dials ok/failed/hung {storm['dials_ok']}/{storm['dials_failed']}/"
            f"{storm['dials_hung']}")
    finally:
        for s in sims:
            s.stop()
    # After the fleet left: descriptors back to the server's own.
    time.sleep(2)
    r["fds_after_fleet_left"] = server.fds()
    r["rss_kib_after_fleet_left"] = server.mem()[0]
    server.stop()
    return r


def echo_server(work):
    """A TCP echo destination (asyncio) on loopback; returns (process, port)."""
    port = free_port()
    code = ("import asyncio\n"
            "async def h(r, w):\n"
            "    try:\n"
            "        while True:\n"
            "            b = await r.read(65536)\n"
            "            if not b: break\n"
            "            w.write(b)\n"
            "            await w.drain()\n"
            "    except Exception: pass\n"
            "    w.close()\n"
            "async def main():\n"
            f"    s = await asyncio.start_server(h, '127.0.0.1', {port}, backlog=4096)\n"
            "    await s.serve_forever()\n"
            "asyncio.run(main())\n")
    p = start([sys.executable, "-c", code], f"{work}/echo.log")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return p, port
        except OSError:
            time.sleep(0.05)
    raise Failure("echo destination did not start")


def run_one_agent(args, work, kind):
    """A real agent with many tunnels to an echo destination: its memory per tunnel."""
    server = Server(kind, args, work)
    server.start()
    echo, port = echo_server(work)
    c = f"{work}/certs"
    if kind == "konn":
        argv = [f"{args.bin}/proxy-agent", "--health-server-port=0", "--admin-server-port=0"]
    else:
        argv = [f"{args.upstream_bin}/agent", "--health-server-host=127.0.0.1",
                f"--health-server-port={free_port()}", "--admin-bind-address=127.0.0.1",
                f"--admin-server-port={free_port()}"]
    argv += ["--proxy-server-host=127.0.0.1", f"--proxy-server-port={server.agent_port}",
             f"--ca-cert={c}/ca.crt", f"--agent-cert={c}/agent.crt", f"--agent-key={c}/agent.key",
             f"--agent-id={kind}-one"]
    agent = start(argv, f"{work}/{kind}-one-agent.log")
    r = {"kind": kind}
    try:
        # Connected once a dial succeeds.
        t0 = time.monotonic()
        while True:
            o = run_frontend(args, server, ["--tunnels=1", f"--dest=127.0.0.1:{port}"],
                             f"{kind}-one-probe")["open"]
            if o["opened"] == 1:
                break
            if time.monotonic() - t0 > 30 or agent.poll() is not None:
                raise Failure(f"{kind}: the real agent never served a dial ({o['first_error']})")
            time.sleep(0.5)
        # A little traffic first, as a node's agent has seen, then the idle footprint.
        run_frontend(args, server, ["--tunnels=500", "--per-conn=50", "--active=500",
                                    "--round-trips=2", f"--dest=127.0.0.1:{port}"],
                     f"{kind}-one-warm")
        time.sleep(1)
        r["agent_rss_kib_idle"], r["agent_pss_kib_idle"] = proc_mem(agent.pid)
        r["agent_threads_idle"] = proc_threads(agent.pid)
        t = args.agent_tunnels
        p = frontend(args, server, [f"--tunnels={t}", "--per-conn=100", "--concurrency=256",
                                    "--active=100", "--round-trips=5",
                                    f"--dest=127.0.0.1:{port}"],
                     f"{kind}-one-tunnels", wait_stdin=True)
        o = read_event(p, "open", 600)
        read_event(p, "rtt", 120)
        time.sleep(1)
        rss1, pss1 = proc_mem(agent.pid)
        p.stdin.write(b"close\n")
        p.stdin.flush()
        read_event(p, "closed", 120)
        time.sleep(2)
        rss2, _ = proc_mem(agent.pid)
        p.stdin.write(b"exit\n")
        p.stdin.flush()
        p.wait(timeout=30)
        r.update({"tunnels": t, "opened": o["opened"], "failed": o["failed"],
                  "open_s": o["open_s"], "first_error": o.get("first_error", ""),
                  "agent_rss_kib_per_tunnel": (rss1 - r["agent_rss_kib_idle"]) / max(1, o["opened"]),
                  "agent_pss_kib_per_tunnel": (pss1 - r["agent_pss_kib_idle"]) / max(1, o["opened"]),
                  "agent_rss_kib_after_close": rss2, "agent_threads_busy": proc_threads(agent.pid)})
        log(f"{kind}: one agent: {o['opened']} tunnels, "
            f"{r['agent_rss_kib_per_tunnel']:.2f} KiB RSS/tunnel in the agent, idle RSS "
            f"{r['agent_rss_kib_idle']} KiB")
    finally:
        stop(agent)
        stop(echo)
        server.stop()
    return r


ROWS = [
    # (label, path, format, lower is better)
    ("agents connected (of N)", ("agents_connected",), "{}"),
    ("time to connect them, ramped (s)", ("connect_all_s",), "{:.1f}"),
    ("server RSS per idle agent (KiB)", ("rss_kib_per_agent",), "{:.1f}"),
    ("server Pss per idle agent (KiB)", ("pss_kib_per_agent",), "{:.1f}"),
    ("server RSS with N agents (MiB)", ("rss_kib_n",), "mib"),
    ("idle CPU per 1000 agents (ms / idle period)", ("idle_cpu_ms_per_1000_agents",), "{:.1f}"),
    ("server threads", ("threads",), "{}"),
    ("destHost dial p50 / p99 at 10 (us)", ("routing", 0), "route"),
    ("destHost dial p50 / p99 at 1000 (us)", ("routing", 1), "route"),
    ("destHost dial p50 / p99 at N (us)", ("routing", -1), "route"),
    ("default dial p50 / p99 at N (us)", ("routing_default",), "route"),
    ("server CPU per destHost dial at N (us)", ("routing", -1, "server_cpu_us_per_dial"), "{:.0f}"),
    ("tunnels opened", ("tunnels", "opened"), "{}"),
    ("time to open them (s)", ("tunnels", "open_s"), "{:.1f}"),
    ("server RSS per tunnel (KiB)", ("tunnels", "rss_kib_per_tunnel"), "{:.2f}"),
    ("server RSS per frontend connection (KiB)", ("tunnels", "rss_kib_per_frontend_conn"), "{:.1f}"),
    ("RSS given back after close (MiB)", ("tunnels", "rss_kib_given_back"), "mib"),
    ("RSS kept after close (MiB)", ("tunnels", "rss_kib_kept_after_close"), "mib"),
    ("round trip p50 / p99 under load (us)", ("tunnels",), "rtt"),
    ("storm: all agents back (s)", ("storm", "all_back_s"), "{:.1f}"),
    ("storm: agents back at the end", ("storm", "connected_at_end"), "{}"),
    ("storm: TLS handshakes/s", ("storm", "handshakes_per_s"), "{:.0f}"),
    ("storm: server CPU per handshake (ms)", ("storm", "server_cpu_ms_per_handshake"), "{:.2f}"),
    ("storm: dials ok / failed / hung", ("storm",), "dials"),
    ("storm: failed dial p99 (ms)", ("storm", "dial_failed_p99_ms"), "{:.1f}"),
    ("storm: /healthz p99 / max (ms)", ("storm",), "healthz"),
    ("after storm: routable dials", ("storm",), "routable"),
    ("fds idle / after tunnels / after storm", (), "fds"),
    ("gauges not back to idle after tunnels / storm", ("gauges_drift",), "drift"),
    ("one agent: tunnels", ("one", "opened"), "{}"),
    ("one agent: agent RSS per tunnel (KiB)", ("one", "agent_rss_kib_per_tunnel"), "{:.2f}"),
    ("one agent: agent idle RSS / Pss (MiB)", ("one",), "agentmem"),
]


def get(d, path):
    for k in path:
        if d is None:
            return None
        if isinstance(k, int):
            try:
                d = d[k]
            except (IndexError, KeyError, TypeError):
                d = None
        else:
            d = d.get(k) if isinstance(d, dict) else None
    return d


def fmt(d, path, f):
    v = get(d, path) if path else d
    if v is None:
        return "-", None
    if f == "mib":
        return f"{v / 1024:.1f}", v
    if f == "route":
        return f"{v['p50_us']:.0f} / {v['p99_us']:.0f}", v["p50_us"]
    if f == "rtt":
        return (f"{v.get('rtt_p50_us') or 0:.0f} / {v.get('rtt_p99_us') or 0:.0f}",
                v.get("rtt_p50_us"))
    if f == "dials":
        return f"{v.get('dials_ok')} / {v.get('dials_failed')} / {v.get('dials_hung')}", None
    if f == "healthz":
        p99, mx = v.get("healthz_p99_ms"), v.get("healthz_max_ms")
        return (f"{p99:.1f} / {mx:.1f}" if p99 is not None else "-"), p99
    if f == "routable":
        return f"{v.get('routable_ok')} of {v.get('routable_dials')}", None
    if f == "fds":
        a = v.get("fds_after_phase", {})
        if v.get("fds_idle") is None:
            return "-", None
        return f"{v.get('fds_idle')} / {a.get('tunnels')} / {a.get('storm')}", None
    if f == "drift":
        return f"{len(v.get('tunnels', {}))} / {len(v.get('storm', {}))}", None
    if f == "agentmem":
        return (f"{(v.get('agent_rss_kib_idle') or 0) / 1024:.1f} / "
                f"{(v.get('agent_pss_kib_idle') or 0) / 1024:.1f}"), v.get("agent_rss_kib_idle")
    return f.format(v), v


def table(results):
    kinds = [k for k in ("konn", "upstream") if k in results]
    w = max(len(r[0]) for r in ROWS)
    lines = [f"{'':{w}}  " + "  ".join(f"{k:>18}" for k in kinds) +
             ("  konn/upstream" if len(kinds) == 2 else "")]
    for label, path, f in ROWS:
        cells, vals = [], []
        for k in kinds:
            s, v = fmt(results[k], path, f)
            cells.append(f"{s:>18}")
            vals.append(v)
        ratio = ""
        if len(kinds) == 2 and all(isinstance(v, (int, float)) and v for v in vals):
            ratio = f"{vals[0] / vals[1]:.2f}"
        lines.append(f"{label:{w}}  " + "  ".join(cells) + (f"  {ratio:>13}" if ratio else ""))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="konn's build/ci/bin")
    ap.add_argument("--src", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--upstream-bin",
                    default=os.path.expanduser("~/.cache/konn-upstream/v0.30.4/bin"))
    ap.add_argument("--only", default="konn,upstream", help="konn, upstream or both")
    ap.add_argument("--quick", action="store_true", help="small N, short phases (smoke run)")
    ap.add_argument("--agents", type=int, default=19000,
                    help="N: the fd limit of 20 000 per process caps a server near 19 900 agents")
    ap.add_argument("--tunnels", type=int, default=100000)
    ap.add_argument("--per-conn", type=int, default=200,
                    help="tunnels per frontend HTTP/2 connection in the tunnels phase (the fd "
                         "limit leaves ~900 connections beside N agents)")
    ap.add_argument("--conn-tunnels", type=int, default=500,
                    help="tunnels of the one-per-connection run (cost per frontend connection)")
    ap.add_argument("--agent-tunnels", type=int, default=18000,
                    help="tunnels of the one-agent phase (each a real socket in the agent and "
                         "the echo destination: under the fd limit)")
    ap.add_argument("--routing-dials", type=int, default=1000)
    ap.add_argument("--idle-seconds", type=float, default=30)
    ap.add_argument("--ramp", type=int, default=300,
                    help="agents started per second (faster only makes a loaded server time out"
                         " handshakes it began)")
    ap.add_argument("--agents-per-shard", type=int, default=10000)
    ap.add_argument("--source-addrs", default="", help="e.g. 127.0.0.1,127.0.0.2")
    ap.add_argument("--connect-timeout", type=float, default=240,
                    help="seconds per fleet step; a server short of it is measured as it is")
    ap.add_argument("--storm-timeout", type=float, default=180)
    ap.add_argument("--storm-dial-seconds", type=float, default=20)
    ap.add_argument("--phases", default="fleet,one-agent")
    ap.add_argument("--json", default="", help="write the results here")
    ap.add_argument("--work", default="")
    args = ap.parse_args()
    if args.quick:
        args.agents = min(args.agents, 300)
        args.tunnels = min(args.tunnels, 3000)
        args.per_conn = min(args.per_conn, 50)
        args.conn_tunnels = min(args.conn_tunnels, 200)
        args.agent_tunnels = min(args.agent_tunnels, 1000)
        args.routing_dials = min(args.routing_dials, 100)
        args.idle_seconds = min(args.idle_seconds, 3)
        args.storm_dial_seconds = min(args.storm_dial_seconds, 3)
    if args.agents < 1 or args.agents > 19900:
        ap.error("--agents: 1..19900 (a process has at most 20 000 descriptors here)")
    if args.agents + args.tunnels / max(1, args.per_conn) > 19900:
        ap.error(f"--agents {args.agents} + --tunnels/--per-conn "
                 f"{args.tunnels // max(1, args.per_conn)} frontend connections pass the "
                 "server's 20 000 descriptors: raise --per-conn")
    kinds = [k for k in args.only.split(",") if k]
    for k in kinds:
        if k not in ("konn", "upstream"):
            ap.error(f"--only: unknown server {k}")
    if "upstream" in kinds and not os.access(f"{args.upstream_bin}/server", os.X_OK):
        ap.error(f"--upstream-bin: no server in {args.upstream_bin} (bench/build-upstream.sh)")
    work = args.work or tempfile.mkdtemp(prefix="konn-fleet.")
    os.makedirs(work, exist_ok=True)
    subprocess.run(["bash", f"{args.src}/scripts/gen-certs.sh", f"{work}/certs"], check=True)
    log(f"work dir {work}; N={args.agents} agents, {args.tunnels} tunnels "
        f"({args.per_conn} per connection)")
    phases = args.phases.split(",")
    results = {}
    for k in kinds:
        results[k] = {}
        try:
            if "fleet" in phases:
                results[k].update(run_server(args, work, k))
            if "one-agent" in phases:
                results[k]["one"] = run_one_agent(args, work, k)
        except Failure as e:
            log(f"{k}: FAILED: {e}")
            results[k]["error"] = str(e)
        kill_all()
    commit = subprocess.run(["git", "-C", args.src, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print(f"\nfleet: N={args.agents} agents, {args.tunnels} tunnels ({args.per_conn} per "
          f"connection), idle period {args.idle_seconds:.0f} s, commit {commit}, "
          f"{os.cpu_count()} cores")
    print(table(results))
    for k, v in results.items():
        for phase, drift in v.get("gauges_drift", {}).items():
            for g, (was, now) in sorted(drift.items()):
                print(f"{k}: after {phase}: {g} {was} -> {now} (idle -> now)")
        if "error" in v:
            print(f"{k}: FAILED: {v['error']}")
    out = {"commit": commit, "argv": sys.argv, "agents": args.agents, "tunnels": args.tunnels,
           "per_conn": args.per_conn, "idle_seconds": args.idle_seconds, "results": results}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        log(f"wrote {args.json}")
    return 1 if any("error" in v for v in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
