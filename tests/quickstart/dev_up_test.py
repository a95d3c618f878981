#!/usr/bin/env python3
"""The README's quickstart, for real: runs scripts/dev-up.sh (no setup and no build: the binaries
of this build tree), runs every command its hints print exactly as printed, checks each one's
output, checks through the daemons' /metrics that kubectl's traffic went through socks5, the
CONNECT proxy and the Konnectivity tunnel, then runs `dev-up.sh stop`.

dev-up.sh listens on fixed ports (1080, 8001, 8002, 8091-8098, 18080): ctest runs this test alone
(RUN_SERIAL), and it fails at once, naming them, when one of them is taken.

Usage: dev_up_test.py SOURCE_DIR BIN_DIR
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

PORTS = [1080, 8001, 8002, 8091, 8092, 8093, 8094, 8095, 8096, 8097, 8098, 18080]

# Every printed command must match one rule: (pattern over the command, patterns its output must
# contain). A new hint without a rule fails the test, so it gets one.
RULES = [
    (r"proxy-test-client .*--request-path=/hello", [r"hello from demo-origin.*/hello"]),
    (r"proxy-test-client .*--pipe", [r"HTTP/1\.1 200 OK", r"/piped"]),
    (r"curl --socks5-hostname .*/socks", [r"hello from demo-origin.*/socks"]),
    (r"kubectl --kubeconfig=\S+ get pods --watch",
     [r"NAME\s+READY\s+STATUS", r"pod-0", r"pod-2"]),
    (r"kubectl --kubeconfig=\S+ get pods$", [r"NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE",
                                             r"pod-0\s+1/1\s+Running", r"pod-1"]),
    (r"kubectl --kubeconfig=\S+ version$", [r"Client Version: v", r"Server Version: v1\.32\.0"]),
    (r"kubectl --kubeconfig=\S+ get --raw /api/v1/namespaces$",
     [r'"kind":"NamespaceList"', r'"kube-system"']),
    (r"kubectl --kubeconfig=\S+ get namespaces$",
     [r"NAME\s+STATUS\s+AGE", r"kube-system\s+Active"]),
    (r"curl -s http://127\.0\.0\.1:8095/metrics \| grep",
     [r"konnectivity_network_proxy_server_dial_duration_seconds_count \d+"]),
    (r"curl -s http://127\.0\.0\.1:8096/metrics \| grep ", [r"konn_socks5_sessions_total"]),
    (r"curl -s http://127\.0\.0\.1:8097/metrics \| grep ", [r"konn_kubeproxy_requests_total"]),
    (r"curl http://127\.0\.0\.1:8001/api/$", [r'"kind":"APIVersions"']),
    (r"kubectl --server=http://127\.0\.0\.1:8001 get pods$", [r"pod-0\s+1/1\s+Running"]),
]

# The counters that show where a kubectl command's connections went, by kubeconfig.
SERVER_DIALS = ("http://127.0.0.1:8095/metrics",
                "konnectivity_network_proxy_server_dial_duration_seconds_count")
SOCKS5_SESSIONS = ("http://127.0.0.1:8096/metrics", "konn_socks5_sessions_total")
CONNECT_REQUESTS = ("http://127.0.0.1:8098/metrics",
                    'konn_kubeproxy_requests_total{mode="connect"}')
PROXY_REQUESTS = ("http://127.0.0.1:8097/metrics", 'konn_kubeproxy_requests_total{mode="proxy"}')
PATHS = {
    "kubeconfig-socks5 ": [SOCKS5_SESSIONS, SERVER_DIALS],
    "kubeconfig-socks5-name ": [SOCKS5_SESSIONS, SERVER_DIALS],
    "kubeconfig-connect ": [CONNECT_REQUESTS, SERVER_DIALS],
    "--server=http://127.0.0.1:8001 ": [PROXY_REQUESTS],
}


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def counter(url, name):
    """The sum of the samples of `name` ("metric" or "metric{label=\"v\",...}": the samples
    carrying at least those labels) on a Prometheus text page; 0 when absent."""
    base, _, labels = name.partition("{")
    want = set(labels.rstrip("}").split(",")) if labels else set()
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z_:][\w:]*)(?:\{([^}]*)\})? (\S+)", line)
        if m and m.group(1) == base and want <= set((m.group(2) or "").split(",")):
            total += float(m.group(3))
    return total


def parse_hints(out):
    """The commands after "konn is up": lines indented by 4 whose first word is a program,
    continued by lines after a trailing backslash."""
    lines = out[out.index("konn is up"):].splitlines()
    commands, current = [], None
    for line in lines:
        if current is not None:
            current += "\n" + line
            if not line.endswith("\\"):
                commands.append(current)
                current = None
            continue
        m = re.match(r"^    (\S.*)$", line)
        if not m or not re.match(r"^(curl|kubectl|printf|/)", m.group(1)):
            continue
        if line.endswith("\\"):
            current = m.group(1)
        else:
            commands.append(m.group(1))
    return commands


def main():
    src, bin_dir = sys.argv[1], sys.argv[2]
    taken = []
    for p in PORTS:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", p)) == 0:
                taken.append(p)
    if taken:
        fail("ports dev-up.sh needs are taken (another dev-up suite running?): %s" % taken)
    if not shutil.which("kubectl"):
        fail("kubectl is not installed: the quickstart's kubectl hints cannot be checked")

    work = tempfile.mkdtemp(prefix="konn-devup-")
    home = os.path.join(work, "home")
    os.makedirs(home)
    env = dict(os.environ)
    env.update({
        "KONN_DEV_UP_NO_BUILD": "1",
        "KONN_DEV_UP_BIN_DIR": bin_dir,
        "KONN_DEV_UP_RUN_DIR": os.path.join(work, "run"),
        # No kubeconfig context: dev-up starts its fake apiserver. A private HOME keeps kubectl's
        # discovery cache out of the user's.
        "KUBECONFIG": os.path.join(work, "no-kubeconfig"),
        "HOME": home,
    })
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(k, None)
    dev_up = os.path.join(src, "scripts", "dev-up.sh")
    try:
        t0 = time.monotonic()
        r = subprocess.run(["bash", dev_up], env=env, capture_output=True, text=True, timeout=120)
        print(r.stdout + r.stderr, flush=True)
        if r.returncode != 0:
            fail("dev-up.sh exited %d" % r.returncode)
        print("dev-up.sh took %.1f s" % (time.monotonic() - t0))
        for phase in ("certs", "start"):
            if not re.search(r"^dev-up: %s\s+[0-9.]+ s" % phase, r.stdout, re.M):
                fail("no duration line for phase %s" % phase)
        commands = parse_hints(r.stdout)
        print("%d commands printed" % len(commands))
        if len(commands) < 14:
            fail("expected at least 14 commands in the hints, got %d" % len(commands))
        unmatched_rules = [pat for pat, _ in RULES]
        for cmd in commands:
            flat = cmd.replace("\\\n", " ")
            flat = re.sub(r"\s+", " ", flat).strip()
            rule = next(((pat, wants) for pat, wants in RULES if re.search(pat, flat)), None)
            if rule is None:
                fail("no check for the printed command: " + flat)
            if rule[0] in unmatched_rules:
                unmatched_rules.remove(rule[0])
            paths = [v for k, v in PATHS.items() if k in flat + " "]
            before = [counter(*c) for c in paths[0]] if paths else []
            t = time.monotonic()
            # As printed: the shell reads it as a user's shell would (quotes, pipes, backslashes).
            p = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True,
                               timeout=60)
            took = time.monotonic() - t
            out = p.stdout + p.stderr
            shown = "\n".join("  | " + line for line in out.splitlines()[:12])
            print("$ %s\n  (exit %d, %.1f s)\n%s" % (cmd, p.returncode, took, shown), flush=True)
            if p.returncode != 0:
                fail("exit %d: %s" % (p.returncode, flat))
            for want in rule[1]:
                if not re.search(want, out):
                    fail("%r not in the output of: %s" % (want, flat))
            if paths:
                after = [counter(*c) for c in paths[0]]
                for (url, name), b, a in zip(paths[0], before, after):
                    if a <= b:
                        fail("%s did not grow (%g -> %g) during: %s" % (name, b, a, flat))
                    print("  %s: %g -> %g" % (name, b, a))
        if unmatched_rules:
            fail("no printed command for the checks: %s" % unmatched_rules)
    finally:
        s = subprocess.run(["bash", dev_up, "stop"], env=env, capture_output=True, text=True,
                           timeout=60)
        print(s.stdout + s.stderr, flush=True)
    if "stopped" not in s.stdout:
        fail("dev-up.sh stop did not say so")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as sk:
            if sk.connect_ex(("127.0.0.1", 1080)) != 0:
                break
        time.sleep(0.1)
    else:
        fail("socks5 still listening after dev-up.sh stop")
    shutil.rmtree(work, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
