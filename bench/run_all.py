#!/usr/bin/env python3
"""konn benchmark, one command (started by bench/run-all.sh, which builds and installs peers).

Starts every daemon and peer on loopback, runs each workload against each with konn-loadgen
(wrk and curl for the kubectl-proxy HTTP workloads), repeats --runs times, and prints one table
of medians with every figure as a ratio to the direct path and to the peer measured in the same
run; --json=FILE writes the same as JSON. Every workload checks its bytes; a failure is printed
and makes the exit status 1. All processes run in their own process groups and are stopped on
exit, Ctrl-C or SIGTERM. See docs/performance.md.
"""
import argparse
import json
import os
import random
import re
import resource
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")
UPSTREAM = {  # issue 9: upstream ANP on a 2-core machine like ours, same kind of client
    ("bulk down 1x", "MB/s"): (100, 200),
    ("bulk up 1x", "MB/s"): (100, 200),
    ("rr 1 tunnel", "p50 us"): (180, 350),
    ("rr 1 tunnel", "p99 us"): (400, 1300),
    ("memory 1000 idle", "KiB/tunnel server"): (77, 77),
}
KONN_TUNNELS = ("konn-grpc", "konn-connect", "konn-grpc-go")
# With --upstream-bin: upstream ANP's server and agent (bench/build-upstream.sh), started like
# ours and driven by the same clients; each konn target is given as a ratio to its counterpart.
UPSTREAM_OF = {"konn-grpc": "anp-grpc", "konn-grpc-go": "anp-grpc-go",
               "konn-connect": "anp-connect"}
ANP_TARGETS = ("anp-grpc", "anp-grpc-go", "anp-connect")
# Driven by the Go client (grpc-go, a new HTTP/2 connection per tunnel as kube-apiserver's
# konnectivity-client opens one): the daemons of the target named after it without "-go".
GO_TARGETS = ("konn-grpc-go", "anp-grpc-go")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Failure(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Processes


class Proc:
    def __init__(self, name, popen, logfile):
        self.name, self.popen, self.logfile = name, popen, logfile

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def log_text(self):
        try:
            with open(self.logfile, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


class Processes:
    """Every process we start, each in its own session (process group), stopped in reverse."""

    def __init__(self, work):
        self.work, self.procs = work, []

    def start(self, name, argv, ready=None, timeout=20, stdin=None, env=None):
        logfile = os.path.join(self.work, name + ".log")
        out = open(logfile, "w")
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=stdin
                                 or subprocess.DEVNULL, start_new_session=True, env=env)
        out.close()
        p = Proc(name, popen, logfile)
        self.procs.append(p)
        if ready is None:
            return p, None
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = ready(p) if callable(ready) else re.search(ready, p.log_text())
            if m:
                return p, m
            if not p.alive():
                break
            time.sleep(0.05)
        raise Failure(f"{name} did not start: {' '.join(argv)}\n{p.log_text()[-2000:]}")

    def stop(self, p, grace=5):
        if p.alive():
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.popen.wait(1)
            except subprocess.TimeoutExpired:
                # A konn agent drains on the first signal and stays up, as upstream's
                # does, until a second one.
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    p.popen.wait(max(grace - 1, 0))
                except subprocess.TimeoutExpired:
                    pass
        try:  # whatever is left of its group (forked children of dante, squid helpers)
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.popen.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def stop_all(self):
        for p in reversed(self.procs):
            self.stop(p)
        self.procs = []


def tree(pid):
    """pid and its descendants."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        ppid = int(st[st.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def memory_kib(pid):
    """(Pss, RSS) in KiB summed over the process tree: Pss splits shared pages fairly between
    dante's or squid's forked processes."""
    pss = rss = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1])
        except OSError:
            pass
    return pss, rss


def cpu_seconds(pid):
    """utime + stime of the tree, plus what exited children left in the root's cutime/cstime."""
    total = 0
    for i, p in enumerate(tree(pid)):
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])
        if i == 0:
            total += int(fields[13]) + int(fields[14])
    return total / CLK_TCK


class OpProfile:
    """Where the CPU of one operation goes, per daemon: CPU time and context switches of every
    thread (/proc/PID/task), and with perf (linux-perf) the system calls the daemon makes and
    the wake-ups it causes (tracepoints raw_syscalls:sys_enter and sched:sched_wakeup, counted,
    not sampled). start() before the workload, stop(ops) after it."""

    EVENTS = "raw_syscalls:sys_enter,sched:sched_wakeup"

    def __init__(self, daemons):
        self.daemons = daemons  # [(label, Proc)]
        self.perf = []

    @staticmethod
    def threads(pid):
        out = {}
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return out
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    comm = f.read().strip()
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    st = f.read()
                cs = 0
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt")):
                            cs += int(line.split()[1])
            except OSError:
                continue
            fields = st[st.rindex(")") + 2:].split()
            out[tid] = (comm, cs, (int(fields[11]) + int(fields[12])) / CLK_TCK)
        return out

    @staticmethod
    def perf_enable(work, timeout=10.0):
        """Tells a `perf stat -D -1 --control fifo:ctl,ack` started in `work` to count, and waits
        for its ack: perf then has attached to every thread and counts from here on. A fixed
        sleep was not enough on a loaded machine: perf attached late, missed part of the
        workload, and the counts per operation came out a third of the true ones."""
        # O_RDWR: a FIFO opened so neither blocks nor fails while perf has not opened its end.
        ctl = os.open(os.path.join(work, "ctl"), os.O_RDWR)
        ack = os.open(os.path.join(work, "ack"), os.O_RDWR | os.O_NONBLOCK)
        try:
            os.write(ctl, b"enable\n")
            deadline, got = time.time() + timeout, b""
            while b"ack" not in got:
                left = deadline - time.time()
                if left <= 0 or not select.select([ack], [], [], left)[0]:
                    return False
                got += os.read(ack, 64)
            return True
        finally:
            os.close(ctl)
            os.close(ack)

    def start(self):
        self.before = [self.threads(p.pid) for _, p in self.daemons]
        self.perf = []
        if shutil.which("perf"):
            for _, p in self.daemons:
                work = tempfile.mkdtemp(prefix="konn-opprofile-")
                os.mkfifo(os.path.join(work, "ctl"))
                os.mkfifo(os.path.join(work, "ack"))
                out = os.path.join(work, "stat.csv")
                proc = subprocess.Popen(
                    ["perf", "stat", "-x,", "-e", self.EVENTS, "-D", "-1", "--control",
                     f"fifo:{work}/ctl,{work}/ack", "-p", str(p.pid), "-o", out],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                # Counts are kept only from a perf that acknowledged before the workload.
                self.perf.append((proc, out if self.perf_enable(work) else None, work))

    def stop(self, ops):
        """{label: {"cpu us/op": .., "cs/op": .., "syscalls/op": .., "wakeups/op": ..,
        "threads": {comm: (cs/op, cpu us/op)}}}"""
        after = [self.threads(p.pid) for _, p in self.daemons]
        counts = []
        for proc, out, work in self.perf:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
            c = {}
            try:
                if out is not None:
                    with open(out) as f:
                        for line in f:
                            parts = line.strip().split(",")
                            if len(parts) > 2 and parts[0].replace(".", "").isdigit():
                                c[parts[2]] = float(parts[0])
            except OSError:
                pass
            shutil.rmtree(work, ignore_errors=True)
            counts.append(c)
        result = {}
        for i, ((label, _), b, a) in enumerate(zip(self.daemons, self.before, after)):
            threads, cs, cpu = {}, 0, 0.0
            for tid, (comm, tcs, tcpu) in a.items():
                bcs, bcpu = b.get(tid, (comm, 0, 0.0))[1:]
                dcs, dcpu = tcs - bcs, tcpu - bcpu
                cs, cpu = cs + dcs, cpu + dcpu
                if dcs or dcpu:
                    prev = threads.get(comm, (0, 0.0))
                    threads[comm] = (prev[0] + dcs, prev[1] + dcpu)
            r = {"cpu us/op": cpu * 1e6 / ops, "cs/op": cs / ops,
                 "threads": {k: (v[0] / ops, v[1] * 1e6 / ops) for k, v in threads.items()}}
            c = counts[i] if i < len(counts) else {}
            if "raw_syscalls:sys_enter" in c:
                r["syscalls/op"] = c["raw_syscalls:sys_enter"] / ops
            if "sched:sched_wakeup" in c:
                r["wakeups/op"] = c["sched:sched_wakeup"] / ops
            result[label] = r
        return result


def free_port():
    """A free port below the ephemeral range (servers without SO_REUSEADDR, like microsocks, cannot
    bind a port left in TIME_WAIT by the dial workloads)."""
    for _ in range(500):
        port = random.randint(20000, 32000)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            pass
        finally:
            s.close()
    raise Failure("no free port")


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def wait_port(port, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise Failure(f"port {port} never opened")


# ---------------------------------------------------------------------------------------------
# Targets: what is started and how the load generator reaches it


class Target:
    def __init__(self, name, group, via, daemons, peers=(), dest=None):
        self.name, self.group, self.via = name, group, via
        self.daemons = daemons  # [(label, Proc)] whose memory and CPU are accounted
        self.peers = list(peers)
        self.dest = dest  # where the client connects, when not the destination itself
        self.dead = False

    def check_alive(self):
        for label, p in self.daemons:
            if not p.alive():
                self.dead = True
                raise Failure(f"{self.name}: {label} exited\n{p.log_text()[-2000:]}")


class Launcher:
    """Starts each target (its daemons or peer, on loopback) and restarts one on demand, so the
    memory workload always measures a fresh process."""

    def __init__(self, args, procs, work, bindir, src):
        self.args, self.procs, self.work, self.bin, self.src = args, procs, work, bindir, src
        self.certs = os.path.join(work, "certs")
        subprocess.run(["bash", os.path.join(src, "scripts/gen-certs.sh"), self.certs],
                       check=True)
        _, m = procs.start("destination", [f"{bindir}/konn-loadgen", "serve", "--port=0"],
                           ready=r"listening on (127\.0\.0\.1:\d+)")
        self.dest = m.group(1)
        # kubectl proxy workloads: the fake apiserver of tests/integration/kubeproxy.
        self.kdir = os.path.join(work, "kube")
        subprocess.run([os.path.join(src, "tests/integration/kubeproxy/gen_certs.sh"), self.kdir],
                       check=True)
        _, m = procs.start("apiserver", [f"{bindir}/kubeproxy-fake-apiserver", "--cert",
                                         f"{self.kdir}/server.crt", "--key",
                                         f"{self.kdir}/server.key", "--token", "bench-token"],
                           ready=r"listening on (127\.0\.0\.1:\d+)")
        self.api = m.group(1)
        with open(os.path.join(self.kdir, "kubeconfig"), "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
clusters:
- {{name: fake, cluster: {{server: "https://{self.api}", certificate-authority: ca.crt}}}}
users:
- {{name: bench, user: {{token: bench-token}}}}
contexts:
- {{name: fake, context: {{cluster: fake, user: bench}}}}
current-context: fake
""")
        self.generation = 0

    def start(self, name):
        self.generation += 1
        return getattr(self, "start_" + name.replace("-", "_"))(name)

    def restart(self, target):
        for _, p in target.daemons:
            self.procs.stop(p)
            self.procs.procs.remove(p)
        return self.start(target.name)

    def tag(self, name):
        return f"{name}.{self.generation}"

    def start_direct(self, name):
        return Target(name, "tcp", "direct", [], ["iperf3"])

    def konnectivity(self, name, mode):
        c, sock = self.certs, os.path.join(self.work, name + ".sock")
        server, m = self.procs.start(
            self.tag(name + "-server"),
            [f"{self.bin}/proxy-server", f"--mode={mode}", f"--uds-name={sock}",
             "--delete-existing-uds-file", "--server-port=0", "--agent-bind-address=127.0.0.1",
             "--agent-port=0", "--health-port=0", "--admin-port=0",
             f"--cluster-cert={c}/server.crt", f"--cluster-key={c}/server.key",
             f"--cluster-ca-cert={c}/ca.crt"],
            ready=r"agent listener .* on 127\.0\.0\.1:(\d+)")
        agent, _ = self.procs.start(
            self.tag(name + "-agent"),
            [f"{self.bin}/proxy-agent", "--proxy-server-host=127.0.0.1",
             f"--proxy-server-port={m.group(1)}", f"--ca-cert={c}/ca.crt",
             f"--agent-cert={c}/agent.crt", f"--agent-key={c}/agent.key", f"--agent-id={name}",
             "--health-server-port=0", "--admin-server-port=0"])
        deadline = time.time() + 20
        while "agent connected" not in server.log_text():
            if time.time() > deadline or not agent.alive():
                raise Failure(f"{name}: agent never connected\n{agent.log_text()[-2000:]}")
            time.sleep(0.05)
        scheme = "grpc+unix://" if mode == "grpc" else "connect+unix://"
        return Target(name, "konnectivity", scheme + sock, [("server", server), ("agent", agent)],
                      ["relay2"])

    def start_konn_grpc(self, name):
        return self.konnectivity(name, "grpc")

    def start_konn_connect(self, name):
        return self.konnectivity(name, "http-connect")

    def upstream(self, name, mode):
        """Upstream's server (frontend on a unix socket, plaintext as upstream allows there) and
        agent over mTLS with the same certificates as ours. Upstream takes no port 0: every port
        is a free one, health and admin on loopback; ready once the server's /readyz says an
        agent is connected."""
        c, sock, ub = self.certs, os.path.join(self.work, name + ".sock"), self.args.upstream_bin
        agent_port, health = free_port(), free_port()
        server, _ = self.procs.start(
            self.tag(name + "-server"),
            [f"{ub}/server", f"--mode={mode}", f"--uds-name={sock}",
             "--delete-existing-uds-file", "--server-port=0", "--agent-bind-address=127.0.0.1",
             f"--agent-port={agent_port}", "--health-bind-address=127.0.0.1",
             f"--health-port={health}", "--admin-bind-address=127.0.0.1",
             f"--admin-port={free_port()}", f"--cluster-cert={c}/server.crt",
             f"--cluster-key={c}/server.key", f"--cluster-ca-cert={c}/ca.crt"])
        wait_port(agent_port)
        agent, _ = self.procs.start(
            self.tag(name + "-agent"),
            [f"{ub}/agent", "--proxy-server-host=127.0.0.1", f"--proxy-server-port={agent_port}",
             f"--ca-cert={c}/ca.crt", f"--agent-cert={c}/agent.crt",
             f"--agent-key={c}/agent.key", f"--agent-id={name}",
             "--health-server-host=127.0.0.1", f"--health-server-port={free_port()}",
             "--admin-bind-address=127.0.0.1", f"--admin-server-port={free_port()}"])
        deadline = time.time() + 20
        while not http_ok(f"http://127.0.0.1:{health}/readyz"):
            if time.time() > deadline or not agent.alive() or not server.alive():
                raise Failure(f"{name}: agent never connected\n{server.log_text()[-1500:]}\n"
                              f"{agent.log_text()[-1500:]}")
            time.sleep(0.05)
        scheme = "grpc+unix://" if mode == "grpc" else "connect+unix://"
        return Target(name, "konnectivity", scheme + sock, [("server", server), ("agent", agent)])

    def start_anp_grpc(self, name):
        return self.upstream(name, "grpc")

    def start_anp_connect(self, name):
        return self.upstream(name, "http-connect")

    def start_konn_socks5(self, name):
        port = free_port()
        p, _ = self.procs.start(self.tag(name), [f"{self.bin}/socks5", "--bind-address=127.0.0.1",
                                                 f"--port={port}", "--health-port=0",
                                                 "--log-level=warn"])
        wait_port(port)
        return Target(name, "socks5", f"socks5://127.0.0.1:{port}", [("socks5", p)],
                      ["dante", "microsocks"])

    def start_dante(self, name):
        port, conf = free_port(), os.path.join(self.work, self.tag("danted") + ".conf")
        with open(conf, "w") as f:
            f.write(f"""logoutput: {self.work}/{self.tag("danted")}.out
internal: 127.0.0.1 port = {port}
external: 127.0.0.1
clientmethod: none
socksmethod: none
user.privileged: root
user.unprivileged: nobody
client pass {{ from: 127.0.0.0/8 to: 0.0.0.0/0 }}
socks pass {{ from: 127.0.0.0/8 to: 0.0.0.0/0 }}
""")
        p, _ = self.procs.start(self.tag(name), [shutil.which("danted") or "/usr/sbin/danted",
                                                 "-f", conf, "-p", conf + ".pid"])
        wait_port(port)
        return Target(name, "socks5", f"socks5://127.0.0.1:{port}", [("danted", p)])

    def start_microsocks(self, name):
        port = free_port()
        p, _ = self.procs.start(self.tag(name), [shutil.which("microsocks"), "-i", "127.0.0.1",
                                                 "-p", str(port)])
        wait_port(port)
        return Target(name, "socks5", f"socks5://127.0.0.1:{port}", [("microsocks", p)])

    def start_kubeproxy_connect(self, name):
        p, m = self.procs.start(self.tag(name), [f"{self.bin}/kubeproxy-http", "--mode=connect",
                                                 "--port=0", "--health-port=0",
                                                 "--log-level=warn"],
                                ready=r"Starting to serve on (127\.0\.0\.1:\d+)")
        return Target(name, "connect", f"connect://{m.group(1)}", [("kubeproxy-http", p)],
                      ["tinyproxy", "squid"])

    def start_tinyproxy(self, name):
        port, tdir = free_port(), os.path.join(self.work, self.tag("tinyproxy"))
        os.makedirs(tdir)
        os.chmod(tdir, 0o777)  # it runs as nobody and writes its log there
        with open(os.path.join(tdir, "tinyproxy.conf"), "w") as f:
            f.write(f"""User nobody
Group nogroup
Port {port}
Listen 127.0.0.1
Timeout 600
LogLevel Warning
LogFile "{tdir}/tinyproxy.log"
MaxClients {max(2000, self.args.idle + 100)}
Allow 127.0.0.1
DisableViaHeader Yes
""")
        p, _ = self.procs.start(self.tag(name), [shutil.which("tinyproxy") or
                                                 "/usr/bin/tinyproxy", "-d", "-c",
                                                 f"{tdir}/tinyproxy.conf"])
        wait_port(port)
        return Target(name, "connect", f"connect://127.0.0.1:{port}", [("tinyproxy", p)])

    def start_squid(self, name):
        port, sdir = free_port(), os.path.join(self.work, self.tag("squid"))
        os.makedirs(sdir)
        shutil.chown(sdir, "proxy", "proxy")  # squid drops to the proxy user
        with open(os.path.join(sdir, "squid.conf"), "w") as f:
            f.write(f"""http_port 127.0.0.1:{port}
http_access allow localhost
http_access deny all
cache deny all
cache_mem 8 MB
access_log none
cache_log {sdir}/cache.log
pid_filename {sdir}/squid.pid
coredump_dir {sdir}
shutdown_lifetime 0 seconds
max_filedescriptors 65536
workers 1
""")
        p, _ = self.procs.start(self.tag(name), [shutil.which("squid") or "/usr/sbin/squid",
                                                 "-N", "-f", f"{sdir}/squid.conf"])
        wait_port(port, timeout=40)
        return Target(name, "connect", f"connect://127.0.0.1:{port}", [("squid", p)])

    def start_relay2(self, name):
        """The floor of any tunnel made of two processes: two HAProxy relays in a chain (one
        thread each, plain TCP, no TLS, no framing, no dial round trip), client -> relay1 ->
        relay2 -> destination. What a Konnectivity tunnel cannot beat on this machine."""
        hdir = os.path.join(self.work, self.tag(name))
        os.makedirs(hdir)
        ports = [free_port(), free_port()]
        nexts = [f"127.0.0.1:{ports[1]}", self.dest]
        daemons = []
        for i in (1, 0):  # the second relay first, so the first never dials a closed port
            conf = os.path.join(hdir, f"relay{i + 1}.cfg")
            with open(conf, "w") as f:
                f.write(f"""global
  nbthread 1
  maxconn {max(2000, self.args.idle + 500)}
defaults
  mode tcp
  timeout connect 5s
  timeout client 600s
  timeout server 600s
listen relay
  bind 127.0.0.1:{ports[i]}
  server next {nexts[i]}
""")
            p, _ = self.procs.start(self.tag(f"{name}-relay{i + 1}"),
                                    [shutil.which("haproxy") or "/usr/sbin/haproxy", "-db",
                                     "-f", conf])
            wait_port(ports[i])
            daemons.insert(0, (f"relay{i + 1}", p))
        return Target(name, "relay", "direct", daemons, dest=f"127.0.0.1:{ports[0]}")

    def start_iperf3(self, name):
        port = free_port()
        p, _ = self.procs.start(self.tag(name), [shutil.which("iperf3"), "-s", "-B", "127.0.0.1",
                                                 "-p", str(port)])
        wait_port(port)
        return Target(name, "tcp", f"iperf3:{port}", [("iperf3", p)])

    def start_kubeproxy_http(self, name):
        # Proxy mode opens only --port by default, as kubectl proxy does.
        p, m = self.procs.start(self.tag(name), [f"{self.bin}/kubeproxy-http", "--port=0",
                                                 f"--kubeconfig={self.kdir}/kubeconfig",
                                                 "--log-level=warn"],
                                ready=r"Starting to serve on (127\.0\.0\.1:\d+)")
        return Target(name, "kubectl-proxy", f"http://{m.group(1)}", [("kubeproxy-http", p)],
                      ["kubectl-proxy"])

    def start_kubectl_proxy(self, name):
        p, m = self.procs.start(self.tag(name), ["kubectl", "proxy", "--port=0",
                                                 f"--kubeconfig={self.kdir}/kubeconfig"],
                                ready=r"Starting to serve on (127\.0\.0\.1:\d+)")
        return Target(name, "kubectl-proxy", f"http://{m.group(1)}", [("kubectl", p)])

    def start_apiserver_direct(self, name):
        t = Target(name, "kubectl-proxy", f"https://{self.api}", [])
        t.ca = f"{self.kdir}/ca.crt"
        return t


ALL_TARGETS = ["iperf3", "direct", "relay2", "konn-grpc", "konn-grpc-go", "anp-grpc",
               "anp-grpc-go", "konn-connect", "anp-connect", "konn-socks5", "dante", "microsocks",
               "kubeproxy-connect", "tinyproxy", "squid", "apiserver-direct", "kubeproxy-http",
               "kubectl-proxy"]


# ---------------------------------------------------------------------------------------------
# Workloads


class Bench:
    def __init__(self, args, launcher):
        self.args, self.launcher, self.bindir = args, launcher, launcher.bin
        self.dest = launcher.dest
        self.t = {}
        self.failures = []
        for name in args.only or ALL_TARGETS:
            if name in GO_TARGETS:
                continue  # drives the daemons of the target without "-go": made in run_once
            if name in ANP_TARGETS and not args.upstream_bin:
                continue  # upstream is run only when built (--upstream-bin)
            log(f"starting {name}")
            try:
                self.t[name] = launcher.start(name)
            except Failure as e:  # the others still run; the exit status says it
                log(f"FAILED {name} / start: {e}")
                self.failures.append(f"{name} / start: {e}")
        for go in GO_TARGETS:
            if args.go_client and go[:-3] in self.t and (not args.only or go in args.only):
                self.t[go] = None
        self.rows = {}  # (target, workload, metric, unit) -> [value per run]
        self.profiles = {}  # (target, workload, daemon) -> [{thread: (cs/op, cpu us/op)} per run]

    def record(self, target, workload, metric, unit, value):
        self.rows.setdefault((target, workload, metric, unit), []).append(value)

    def loadgen(self, target, mode, *flags, timeout=None):
        if target.via.startswith("go+unix://"):
            argv = [self.args.go_client, mode, f"--uds={target.via[len('go+unix://'):]}",
                    f"--target={self.dest}", *[f for f in flags if not f.startswith("--threads")]]
        else:
            argv = [f"{self.bindir}/konn-loadgen", mode, f"--via={target.via}",
                    f"--target={target.dest or self.dest}", *flags]
        timeout = timeout or self.args.step_timeout
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failure(f"timed out after {timeout}s: {' '.join(argv)}")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            raise Failure(f"{' '.join(argv)}\n{r.stderr.strip()[-2000:]}")
        out = json.loads(r.stdout.strip().splitlines()[-1])
        # The client's own CPU (it was the only child reaped meanwhile): what the same client
        # spends per operation against each proxy, which bounds the rate of one-at-a-time work.
        out["client_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime +
                                                                   before.ru_stime)
        return out

    def step(self, target, workload, fn):
        """Runs one workload; a failure is recorded and printed, the rest goes on."""
        if target.dead:
            return
        try:
            target.check_alive()
            fn()
            target.check_alive()
        except Failure as e:
            msg = f"{target.name} / {workload}: {e}"
            log("FAILED " + msg)
            self.failures.append(msg)

    def with_cpu(self, target, fn):
        before = [cpu_seconds(p.pid) for _, p in target.daemons]
        result = fn()
        after = [cpu_seconds(p.pid) for _, p in target.daemons]
        return result, [(label, a - b) for (label, _), a, b in zip(target.daemons, after, before)]

    def bulk(self, target):
        a = self.args
        for direction in ("down", "up"):
            for streams in (1, 4):
                name = f"bulk {direction} {streams}x"

                def run():
                    if target.name == "iperf3":
                        res, cpu = self.with_cpu(target, lambda: self.iperf(direction, streams))
                    else:
                        res, cpu = self.with_cpu(target, lambda: self.loadgen(
                            target, "bulk", f"--direction={direction}", f"--streams={streams}",
                            f"--bytes={a.bytes}"))
                    self.record(target.name, name, "MB/s", "MB/s", res["mb_s"])
                    gib = res["bytes"] / 2**30
                    for label, secs in cpu:
                        self.record(target.name, name, "CPU s/GiB" + daemon_suffix(target, label),
                                    "s/GiB", secs / gib)
                self.step(target, name, run)

    def iperf(self, direction, streams):
        port = self.t["iperf3"].via.split(":")[1]
        argv = ["iperf3", "-c", "127.0.0.1", "-p", port, "-n", str(self.args.bytes), "-P",
                str(streams), "-J"] + (["-R"] if direction == "down" else [])
        try:
            r = subprocess.run(argv, capture_output=True, text=True,
                               timeout=self.args.step_timeout)
        except subprocess.TimeoutExpired:
            raise Failure("iperf3 timed out")
        if r.returncode != 0:
            raise Failure(f"iperf3: {r.stdout[-1000:]} {r.stderr[-1000:]}")
        end = json.loads(r.stdout)["end"]
        # iperf3 checks no bytes; it counts them. The receiver's count stops when the sender
        # has written its last byte, short of what is still in socket buffers (a large share of
        # a --quick transfer with 4 streams), so only the sender's count is checked; the rate is
        # the receiver's.
        sent, received = end["sum_sent"], end["sum_received"]
        if sent["bytes"] < self.args.bytes or received["bytes"] <= 0:
            raise Failure(f"iperf3 sent {sent['bytes']} / received {received['bytes']} of "
                          f"{self.args.bytes} bytes")
        return {"mb_s": received["bits_per_second"] / 8e6, "bytes": sent["bytes"]}

    def round_trips(self, target):
        for tunnels in (1, 50):
            name = f"rr {tunnels} tunnel" + ("s" if tunnels > 1 else "")

            def run():
                r = self.profiled_loadgen(target, name, tunnels == 1, "round_trips", "rr",
                                          f"--tunnels={tunnels}", "--size=64",
                                          f"--duration={self.args.duration}s")
                self.record(target.name, name, "p50 us", "us", r["p50_us"])
                self.record(target.name, name, "p99 us", "us", r["p99_us"])
                self.record(target.name, name, "rate", "/s", r["rate"])
            self.step(target, name, run)

    def profiled_loadgen(self, target, workload, profile, ops_key, mode, *flags):
        """loadgen(); with `profile`, on a Konnectivity target, also records where the CPU of
        one operation went (OpProfile over its daemons, divided by result[ops_key])."""
        prof = None
        if profile and target.group in ("konnectivity", "relay") and target.daemons:
            prof = OpProfile(target.daemons)
            prof.start()
        try:
            r = self.loadgen(target, mode, *flags)
        except Failure:
            if prof:
                prof.stop(1)
            raise
        if prof:
            self.record_profile(target, workload, prof.stop(r[ops_key]))
        if profile and r.get(ops_key):
            self.record(target.name, workload, "client cpu us/op", "us",
                        r["client_cpu_s"] * 1e6 / r[ops_key])
        return r

    def record_profile(self, target, workload, result):
        for label, r in result.items():
            suffix = daemon_suffix(target, label)
            for metric, unit in (("cpu us/op", "us"), ("cs/op", ""), ("syscalls/op", ""),
                                 ("wakeups/op", "")):
                if metric in r:
                    self.record(target.name, workload, metric + suffix, unit, r[metric])
            self.profiles.setdefault((target.name, workload, label), []).append(r["threads"])

    def dials(self, target):
        for conc in (1, 8):
            for request in (False, True):
                name = f"dials {conc}x" + (" +request" if request else "")

                def run():
                    r = self.profiled_loadgen(target, name, conc == 1 and request, "dials",
                                              "dials", f"--concurrency={conc}",
                                              f"--request={'true' if request else 'false'}",
                                              f"--duration={self.args.duration}s")
                    self.record(target.name, name, "rate", "/s", r["rate"])
                    self.record(target.name, name, "p99 us", "us", r["p99_us"])
                self.step(target, name, run)

    def head_of_line(self, target):
        def run():
            # The workload takes about 4 durations; a tunnel that never moves again makes it
            # wait for ever, so it is bounded well short of --step-timeout.
            timeout = min(self.args.step_timeout, max(30, 20 * self.args.duration + 10))
            try:
                r = self.loadgen(target, "hol", "--tunnels=3", "--threads=2",
                                 f"--duration={self.args.duration}s", timeout=timeout)
            except Failure as e:
                if target.name in ANP_TARGETS and "timed out" in str(e):
                    raise Failure(f"{e} (upstream's agent stops reading every tunnel once one "
                                  "client stops reading: upstream issue #180)")
                raise
            self.record(target.name, "head-of-line", "MB/s others", "MB/s", r["mb_s"])
            self.record(target.name, "head-of-line", "MB/s others, one stalled", "MB/s",
                        r["mb_s_stalled"])
            self.record(target.name, "head-of-line", "p99 us", "us", r["p99_us"])
            self.record(target.name, "head-of-line", "p99 us, one stalled", "us",
                        r["p99_us_stalled"])
            self.record(target.name, "head-of-line", "stalled/before MB/s", "x", r["mb_s_ratio"])
            self.record(target.name, "head-of-line", "stalled/before p99", "x", r["p99_ratio"])
        self.step(target, "head-of-line", run)

    def memory(self, target, counts, http_get=None):
        for count in counts:
            name = f"memory {count} idle"

            def run():
                flags = [f"--count={count}", "--concurrency=32"]
                via, dest = target.via, target.dest or self.dest
                if http_get:
                    flags.append(f"--http-get={http_get}")
                    via, dest = "direct", target.via.split("//")[1]
                idle = [memory_kib(p.pid) for _, p in target.daemons]
                if via.startswith("go+unix://"):
                    # A gRPC connection per tunnel, as kube-apiserver opens them.
                    argv = [self.args.go_client, "hold", f"--uds={via[len('go+unix://'):]}",
                            f"--target={dest}", *flags]
                else:
                    argv = [f"{self.bindir}/konn-loadgen", "hold", f"--via={via}",
                            f"--target={dest}", *flags]
                holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True,
                                          start_new_session=True)
                try:
                    line = read_line(holder, self.args.step_timeout)
                    if '"ready"' not in line:
                        raise Failure(f"hold: {line} {holder.stderr.read()[-2000:]}")
                    time.sleep(self.args.settle)  # every daemon finishes its per-tunnel set-up
                    held = [memory_kib(p.pid) for _, p in target.daemons]
                    holder.stdin.write("\n")
                    holder.stdin.flush()
                    line = read_line(holder, self.args.step_timeout)
                    if '"closed"' not in line:
                        raise Failure(f"hold close: {line} {holder.stderr.read()[-2000:]}")
                    holder.wait(self.args.step_timeout)
                finally:
                    if holder.poll() is None:
                        os.killpg(holder.pid, signal.SIGKILL)
                        holder.wait()
                # Closes propagate (CLOSE_RSP, agent side), and our daemons' trimmer (every 2 s)
                # hands the freed heap back; a sample at 2 s caught it before or after by chance.
                time.sleep(self.args.after_close)
                after = [memory_kib(p.pid) for _, p in target.daemons]
                for (label, _), i, h, a in zip(target.daemons, idle, held, after):
                    sfx = daemon_suffix(target, label)
                    self.record(target.name, name, "idle MiB" + sfx, "MiB", i[0] / 1024)
                    self.record(target.name, name, "held MiB" + sfx, "MiB", h[0] / 1024)
                    self.record(target.name, name, "KiB/tunnel" + sfx, "KiB",
                                (h[0] - i[0]) / count)
                    self.record(target.name, name, "after close MiB" + sfx, "MiB", a[0] / 1024)
            self.step(target, name, run)

    def kubectl_proxy(self, target):
        path = "/api/v1/namespaces/default/pods"
        a = self.args

        def small():
            url = target.via + path
            extra = []
            if target.name == "apiserver-direct":
                extra = ["-H", "Authorization: Bearer bench-token"]
            subprocess.run(["curl", "-sfk", "-o", "/dev/null", *extra, url], check=False,
                           timeout=30)  # warms the proxy's upstream connection
            secs = max(1, round(a.duration))  # wrk takes whole seconds
            r = subprocess.run(["wrk", "-t1", f"-c{a.wrk_connections}", f"-d{secs}s",
                                "--latency", *extra, url], capture_output=True, text=True,
                               timeout=a.step_timeout)
            out = r.stdout
            if r.returncode != 0 or "Non-2xx" in out or "Socket errors" in out:
                raise Failure(f"wrk: {out[-1500:]} {r.stderr[-500:]}")
            rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
            m = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
            p99 = float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]
            self.record(target.name, "small GET (wrk)", "rate", "/s", rps)
            self.record(target.name, "small GET (wrk)", "p99 us", "us", p99)
        self.step(target, "small GET (wrk)", small)

        def download():
            url = target.via + f"/download?bytes={a.bytes}"
            argv = ["curl", "-sf", "-o", "/dev/null", "-w", "%{size_download} %{speed_download}"]
            if target.name == "apiserver-direct":
                argv += ["--cacert", target.ca, "-H", "Authorization: Bearer bench-token"]
            res, cpu = self.with_cpu(target, lambda: subprocess.run(
                argv + [url], capture_output=True, text=True, timeout=a.step_timeout))
            if res.returncode != 0:
                raise Failure(f"curl {url}: exit {res.returncode} {res.stderr[-500:]}")
            size, speed = res.stdout.split()
            if int(size) != a.bytes:
                raise Failure(f"download got {size} of {a.bytes} bytes")
            self.record(target.name, "download", "MB/s", "MB/s", float(speed) / 1e6)
            for label, secs in cpu:
                self.record(target.name, "download", "CPU s/GiB" + daemon_suffix(target, label),
                            "s/GiB", secs / (a.bytes / 2**30))
        self.step(target, "download", download)

    def restarted(self, name, target):
        """`target` on freshly started daemons, left --settle seconds; None, the failure recorded
        against `name`, when they do not start."""
        try:
            fresh = self.launcher.restart(target)
        except Failure as e:
            self.failures.append(f"{name} / restart: {e}")
            log(f"FAILED {name} / restart: {e}")
            return None
        time.sleep(self.args.settle)
        return fresh

    def run_once(self):
        a = self.args
        for name in [n for n in ALL_TARGETS if n in self.t]:
            target = self.t[name]
            log(f"  {name}")
            if name in GO_TARGETS:
                # The gRPC target's daemons, driven by the Go client: restarted first, so that
                # idle tunnels (a connection each) are measured on fresh processes.
                grpc = self.restarted(name, self.t[name[:-3]])
                if grpc is None:
                    continue
                self.t[name[:-3]] = grpc
                target = self.t[name] = Target(name, "konnectivity",
                                               "go+unix://" + grpc.via[len("grpc+unix://"):],
                                               grpc.daemons, [name[:-3]])
                self.memory(target, [a.idle])
                self.bulk(target)
                self.round_trips(target)
                self.dials(target)
                continue
            if name != "iperf3" and target.daemons:
                # First, each count on a freshly started daemon: memory idle, with idle tunnels
                # held, after they closed.
                counts = [a.idle] + ([a.idle_ours] if name in KONN_TUNNELS and
                                     a.idle_ours > a.idle else [])
                for count in counts:
                    fresh = self.restarted(name, target)
                    if fresh is None:
                        target.dead = True
                        break
                    target = self.t[name] = fresh
                    self.memory(target, [count], http_get="/api"
                                if target.group == "kubectl-proxy" else None)
                if target.dead:
                    continue
            if target.group == "kubectl-proxy":
                self.kubectl_proxy(target)
                continue
            self.bulk(target)
            if name == "iperf3":
                continue
            self.round_trips(target)
            self.dials(target)
            self.head_of_line(target)


def daemon_suffix(target, label):
    """Names the daemon in a metric only where a target has several (the Konnectivity server
    and agent), so a single-process target's rows line up with its peers' for the ratios."""
    return f" {label}" if len(target.daemons) > 1 else ""


def read_line(p, timeout):
    """One line of p's stdout within `timeout` seconds."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        raise Failure(f"no answer within {timeout}s")
    return p.stdout.readline().strip()


# ---------------------------------------------------------------------------------------------
# Report


def ratio_text(values):
    return "-" if not values else f"{statistics.median(values):.2f}"


def report(bench, args):
    runs = bench.rows
    results = []
    for (target, workload, metric, unit), vals in runs.items():
        entry = {"target": target, "workload": workload, "metric": metric, "unit": unit,
                 "runs": vals, "median": statistics.median(vals)}
        tgt = bench.t.get(target)
        direct = "apiserver-direct" if tgt and tgt.group == "kubectl-proxy" else "direct"
        ref = runs.get((direct, workload, metric, unit))
        if ref and target != direct:
            entry["vs_direct"] = statistics.median(
                [v / r for v, r in zip(vals, ref) if r])
        peers = {}
        for peer in (tgt.peers if tgt else []):
            pv = runs.get((peer, workload, metric, unit))
            if pv:
                peers[peer] = statistics.median([v / r for v, r in zip(vals, pv) if r])
        anp = UPSTREAM_OF.get(target)
        uv = runs.get((anp, workload, metric, unit)) if anp else None
        if uv and anp == "anp-connect" and workload.startswith("dials") and "+request" not in workload:
            # Upstream's CONNECT frontend writes "200 OK" before it sends DIAL_REQ, so a bare dial
            # through it never waits for the agent: no like-for-like ratio ("dials 1x +request" is).
            entry["vs_upstream_note"] = "n/a: upstream answers 200 before dialling"
            uv = None
        if uv:
            entry["vs_upstream"] = {anp: statistics.median(
                [v / r for v, r in zip(vals, uv) if r])}
        elif target in KONN_TUNNELS and not (anp and anp in bench.t):
            # Issue 9's figures, only where upstream was not run here.
            up = UPSTREAM.get((workload, metric))
            if metric == "KiB/tunnel server" and workload.startswith("memory"):
                up = UPSTREAM.get(("memory 1000 idle", metric))
            if up:
                entry["upstream_quoted"] = list(up)
                peers["upstream(quoted)"] = [entry["median"] / up[1], entry["median"] / up[0]]
        if peers:
            entry["vs_peers"] = peers
        results.append(entry)

    order = {n: i for i, n in enumerate(ALL_TARGETS)}
    results.sort(key=lambda e: (order.get(e["target"], 99), e["workload"], e["metric"]))

    def fmt(v):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"

    header = ("target", "workload", "metric", "median", "runs", "vs direct", "vs peer (same run)",
              "konn / upstream (same run)")
    lines = []
    for e in results:
        peer_txt = []
        for peer, r in e.get("vs_peers", {}).items():
            if isinstance(r, list):
                peer_txt.append(f"{peer} {r[0]:.3g}-{r[1]:.3g}")
            else:
                peer_txt.append(f"{peer} {r:.2f}")
        lines.append((e["target"], e["workload"], e["metric"], fmt(e["median"]) + " " + e["unit"],
                      "/".join(fmt(v) for v in e["runs"]),
                      f"{e['vs_direct']:.2f}" if "vs_direct" in e else "-",
                      ", ".join(peer_txt) or "-",
                      ", ".join(f"{k} {r:.2f}" for k, r in e.get("vs_upstream", {}).items())
                      or e.get("vs_upstream_note", "-")))
    widths = [max(len(str(r[i])) for r in lines + [header]) for i in range(len(header))]
    out = [" | ".join(str(h).ljust(w) for h, w in zip(header, widths)),
           "-+-".join("-" * w for w in widths)]
    out += [" | ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in lines]
    print("\n".join(out))
    print(f"\n{args.runs} run(s), medians; ratios are value/reference within each run, then the"
          " median. Memory is Pss of the daemon's process tree. konn / upstream: against"
          " upstream ANP's anp-grpc / anp-connect of the same run (--upstream-bin)."
          " upstream(quoted): issue 9's figures for upstream ANP, where it was not run.")
    if bench.profiles:
        print("\nPer operation, by thread (median of the runs): context switches / CPU us")
        for (target, workload, daemon), per_run in sorted(
                bench.profiles.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1:])):
            names = sorted({n for r in per_run for n in r})
            cells = []
            for n in names:
                vals = [r[n] for r in per_run if n in r]
                cells.append(f"{n} {statistics.median(v[0] for v in vals):.2f} / "
                             f"{statistics.median(v[1] for v in vals):.0f}")
            print(f"  {target} | {workload} | {daemon}: " + ", ".join(cells))
    if bench.failures:
        print(f"\n{len(bench.failures)} FAILURE(S):")
        for f in bench.failures:
            print("  - " + f.splitlines()[0])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": {k: v for k, v in vars(args).items()},
                       "upstream_quoted": {f"{w} / {m}": v for (w, m), v in UPSTREAM.items()},
                       "results": results, "failures": bench.failures,
                       "threads": [{"target": t, "workload": w, "daemon": d, "runs": r}
                                   for (t, w, d), r in bench.profiles.items()]}, f, indent=1)
        print(f"JSON: {args.json}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="directory of the built binaries")
    ap.add_argument("--src", required=True, help="source tree")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: one run, small sizes and short durations")
    ap.add_argument("--bytes", type=int, default=2**30, help="bytes per bulk transfer")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per timed workload")
    ap.add_argument("--idle", type=int, default=1000, help="idle tunnels for the memory workload")
    ap.add_argument("--idle-ours", type=int, default=10000,
                    help="idle tunnels for konn's Konnectivity daemons")
    ap.add_argument("--wrk-connections", type=int, default=16)
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds a daemon is left to settle before a memory sample")
    ap.add_argument("--after-close", type=float, default=5.0,
                    help="seconds after the idle tunnels closed before the last memory sample")
    ap.add_argument("--step-timeout", type=float, default=300)
    ap.add_argument("--only", default="", help="comma-separated targets (default: all)")
    ap.add_argument("--json", default="")
    ap.add_argument("--go-client", default="",
                    help="konn-go-client binary (bench/goclient): konn-grpc (and anp-grpc)"
                    " driven by grpc-go")
    ap.add_argument("--no-go", action="store_true", help="(run-all.sh) skip the Go client")
    ap.add_argument("--upstream-bin", default="",
                    help="directory of upstream ANP's server and agent (bench/build-upstream.sh):"
                    " adds the targets anp-grpc, anp-grpc-go (with --go-client) and anp-connect")
    ap.add_argument("--keep-work", action="store_true", help="keep logs and configs")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.bytes, args.duration = 1, 64 * 2**20, 0.3
        args.idle, args.idle_ours, args.step_timeout, args.settle = 100, 1000, 60, 0.3
        args.after_close = 2.5
    args.only = [s for s in args.only.split(",") if s]
    unknown = [s for s in args.only if s not in ALL_TARGETS]
    if unknown:
        ap.error(f"--only: unknown {', '.join(unknown)} (targets: {', '.join(ALL_TARGETS)})")
    if args.upstream_bin:
        args.upstream_bin = os.path.abspath(args.upstream_bin)
        for b in ("server", "agent"):
            if not os.access(os.path.join(args.upstream_bin, b), os.X_OK):
                ap.error(f"--upstream-bin: no {b} in {args.upstream_bin} "
                         "(build it with bench/build-upstream.sh)")
    elif any(s in ANP_TARGETS for s in args.only):
        ap.error("--only: anp-grpc and anp-connect need --upstream-bin=DIR "
                 "(bench/build-upstream.sh)")

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    work = tempfile.mkdtemp(prefix="konn-bench-")
    os.chmod(work, 0o755)
    procs = Processes(work)
    status = 1
    try:
        bench = Bench(args, Launcher(args, procs, work, args.bin, args.src))
        for run in range(args.runs):
            log(f"run {run + 1}/{args.runs}")
            bench.run_once()
        report(bench, args)
        status = 1 if bench.failures else 0
    except Failure as e:
        log(f"FAILED: {e}")
    except KeyboardInterrupt:
        log("interrupted")
        status = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        procs.stop_all()
        if args.keep_work or status not in (0, 130):
            log(f"logs and configs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
