#!/usr/bin/env python3
"""h2spec (tests/third_party/h2spec, v2.6.0) against both HTTP/2 listeners of proxy-server.

Starts the built proxy-server in GRPC mode with a unix-socket frontend and a TLS agent port
(server-auth TLS: h2spec has no client certificate), puts socat in front of the unix socket
(h2spec speaks TCP only), runs every h2spec case but EXCLUDED against the frontend (h2c) and
the agent port (TLS, -t -k), reads h2spec's JUnit report and compares the failures with
EXPECTED (failures and skips by design):
  - a failure or skip not listed fails the test (a conformance regression);
  - a listed failure that passes fails it too (the list must stay true: remove the entry);
  - a case that did not run at all fails it.
--flood-only instead runs http2/5.1.2/1, which never ends against the frontend's unlimited stream
count, there for --flood-seconds: the server's peak memory must stay bounded.
Each failure is printed with h2spec's own message (what it sent is the case's title, what it
expected, what it got).

  h2spec_conformance.py --server=BIN --h2spec=BIN --source-dir=DIR [--runs=N] [--listener=...]
  h2spec_conformance.py --flood-only --server=BIN --h2spec=BIN --source-dir=DIR
"""
import argparse
import html
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

# Cases not run, per listener, with why.
EXCLUDED = {
    "http2/5.1.2/1": ("frontend", "opens one stream more than SETTINGS_MAX_CONCURRENT_STREAMS, "
                      "one after another; the frontend advertises 2^31-1 (as grpc-go), so it "
                      "never ends (-o does not bound it). --flood-only runs it for a while "
                      "to bound the server's memory instead"),
}

# Cases whose result is fixed by design, per listener ("both", "frontend" or "agent"):
# (listener, "fail" or "skip", why).
NO_BODY = ("h2spec skips it: it needs a response body (DATA) to watch flow control, and a gRPC "
           "server answers h2spec's plain GET with a trailers-only response")
EXPECTED = {
    "generic/2/2": ("both", "fail", "expects a DATA response body to a plain GET (no content-type "
                    "application/grpc); a gRPC server answers a trailers-only response, as "
                    "grpc-go's own server does"),
    "generic/2/3": ("both", "fail", "same: it waits for a response body that a gRPC server does "
                    "not send to a non-gRPC request"),
    "http2/5.1.2/1": ("agent", "fail", "the agent port advertises 1000 concurrent streams, but "
                      "the server answers each plain GET at once (trailers-only, stream closed), "
                      "so h2spec's streams never exceed the limit and stream 2001 is answered"),
    "http2/6.5.3/1": ("both", "skip", NO_BODY),
    "http2/6.9.1/1": ("both", "skip", NO_BODY),
    "http2/6.9.2/1": ("both", "skip", NO_BODY),
    "http2/6.9.2/2": ("both", "skip", NO_BODY),
}

TOP = {
    "Generic tests for HTTP/2 server": "generic",
    "Hypertext Transfer Protocol Version 2 (HTTP/2)": "http2",
    "HPACK: Header Compression for HTTP/2": "hpack",
}


def list_cases(h2spec):
    """All case ids ("http2/5.1.1/2") and (group id, title) -> case id, from --dryrun."""
    out = subprocess.run([h2spec, "--dryrun", "-p", "1"], capture_output=True, text=True,
                         check=True).stdout
    ids, by_title = [], {}
    key = group = None
    for line in out.splitlines():
        if line in TOP:
            key = TOP[line]
            continue
        m = re.match(r"^\s+([0-9.]+?)\.? (\S.*)$", line)
        g = re.match(r"^\s+(\d+(?:\.\d+)*)\. (.*)$", line)
        c = re.match(r"^\s+(\d+): (.*)$", line)
        if c and key:
            cid = "%s/%s/%s" % (key, group, c.group(1))
            ids.append(cid)
            by_title[("%s/%s" % (key, group), c.group(2).strip())] = cid
        elif g and key:
            group = g.group(1)
        elif m is None and line.strip():
            raise RuntimeError("unexpected h2spec --dryrun line: %r" % line)
    if len(ids) < 140:
        raise RuntimeError("h2spec --dryrun listed only %d cases:\n%s" % (len(ids), out))
    return ids, by_title


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(check, timeout, what, proc=None, log=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.05)
    detail = open(log).read()[-4000:] if log and os.path.exists(log) else ""
    raise RuntimeError("%s did not come up\n%s" % (what, detail))


def tcp_accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def run_h2spec(h2spec, port, tls, cases, report, log):
    args = [h2spec, "-h", "127.0.0.1", "-p", str(port), "-o", "3", "-j", report]
    if tls:
        args += ["-t", "-k"]
    with open(log, "w") as f:
        # A hung case would otherwise hang ctest: bound the whole run.
        subprocess.run(args + cases, stdout=f, stderr=subprocess.STDOUT, timeout=600)


def read_report(report, by_title):
    """{case id: None (passed), "skipped", or the failure text}. h2spec writes failure texts into
    the XML unescaped (innerxml, with raw NUL bytes from PING payloads), so the report is read
    with patterns rather than an XML parser."""
    text = open(report, "rb").read().decode("utf-8", "replace").replace("\x00", "\\0")
    results = {}
    for m in re.finditer(r'<testcase package="([^"]*)" classname="([^"]*)" time="[^"]*">'
                         r'(.*?)</testcase>', text, re.S):
        key = (html.unescape(m.group(1)), html.unescape(m.group(2)).strip())
        cid = by_title.get(key)
        if cid is None:
            raise RuntimeError("JUnit case not in --dryrun: %r" % (key,))
        body = m.group(3)
        bad = re.search(r"<(failure|error)>(.*?)</\1>", body, re.S)
        if "<skipped" in body:
            results[cid] = "skipped"
        elif bad:
            results[cid] = bad.group(2).strip() or "failed"
        else:
            results[cid] = None
    return results


def read_failure_texts(log):
    """{case id: h2spec's failure text ("-> requirement / Expected: ... / Actual: ...")} from the
    "Failures:" part of its text output, which keeps the Expected/Actual labels."""
    text = open(log, "rb").read().decode("utf-8", "replace").replace("\x00", "\\0")
    if "\nFailures:" not in text:
        return {}
    texts, key, group, current = {}, None, None, None
    for line in text.split("\nFailures:", 1)[1].splitlines():
        c = re.match(r"^\s+\u00d7 (\d+): (.*)$", line)
        g = re.match(r"^\s+(\d+(?:\.\d+)*)\. (.*)$", line)
        if line.startswith("Finished in "):
            break
        if line in TOP:
            key, current = TOP[line], None
        elif c and key:
            current = "%s/%s/%s" % (key, group, c.group(1))
            texts[current] = []
        elif g and key:
            group, current = g.group(1), None
        elif current and line.strip() and not line.strip().startswith("using source address"):
            texts[current].append(line.strip())
    return {k: "\n".join(v) for k, v in texts.items()}


def titles(by_title):
    return {cid: "%s %s" % (g, t) for (g, t), cid in by_title.items()}


def check(listener, results, all_cases, names):
    problems = []
    for cid in all_cases:
        if cid in EXCLUDED and EXCLUDED[cid][0] in ("both", listener):
            continue
        if cid not in results:
            problems.append("%s %s: did not run" % (listener, cid))
            continue
        failure = results[cid]
        got = "pass" if failure is None else ("skip" if failure == "skipped" else "fail")
        exp = EXPECTED.get(cid)
        want = exp[1] if exp is not None and exp[0] in ("both", listener) else "pass"
        if got == want:
            continue
        if want == "pass":
            problems.append("%s %s %s (%s)\n    %s" % (
                listener, cid, "FAILED" if got == "fail" else "SKIPPED", names.get(cid, ""),
                failure.replace("\n", "\n    ")))
        else:
            problems.append("%s %s: %s, but EXPECTED says %s (%s): update the list" % (
                listener, cid, got, want, exp[2]))
    return problems


def peak_rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def server_env():
    """The environment of proxy-server: under AddressSanitizer (the sanitizer pass sets
    ASAN_OPTIONS) its quarantine of freed memory is cut to 8 MiB, so that a flood of finished
    streams measures what the server keeps, not the 256 MiB the quarantine holds back."""
    env = dict(os.environ)
    if "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] += ":quarantine_size_mb=8"
    return env


def flood(opts, port, server, work):
    """h2spec's http2/5.1.2/1 on the frontend for --flood-seconds: one connection opening
    finished streams one after another as fast as it can while barely reading. The server must
    keep neither the streams nor an unbounded queue of answers: its memory grows by at most
    --flood-max-mib over what it held before (an AddressSanitizer build starts at ~165 MiB;
    watched every 100 ms; the flood stops as soon as it is crossed, so a failing server does
    not take the machine's memory)."""
    before = peak_rss_mib(server.pid)
    log = open(os.path.join(work, "flood.txt"), "w")
    h2 = subprocess.Popen([opts.h2spec, "-h", "127.0.0.1", "-p", str(port), "http2/5.1.2/1"],
                          stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + opts.flood_seconds
    peak, ended = before, "h2spec still opening streams"
    while time.time() < deadline:
        if server.poll() is not None:
            break
        peak = peak_rss_mib(server.pid)
        if peak - before > opts.flood_max_mib:
            break
        if h2.poll() is not None:
            ended = "h2spec ended early (exit %s)" % h2.returncode
            break
        time.sleep(0.1)
    secs = opts.flood_seconds - max(0.0, deadline - time.time())
    if h2.poll() is None:
        h2.kill()
        h2.wait()
    if server.poll() is not None:
        return ["flood: proxy-server exited (%s)" % server.returncode]
    print("flood %.1fs (http2/5.1.2/1 on the frontend): %s; proxy-server peak RSS %.0f MiB "
          "(%.0f MiB before)" % (secs, ended, peak, before), flush=True)
    if peak - before > opts.flood_max_mib:
        return ["flood: proxy-server peak RSS %.0f MiB, %.0f MiB over its %.0f MiB before, more "
                "than %d MiB after %.1fs of finished streams on one connection that barely "
                "reads: memory grows with the requests (kept streams or unsent answers)"
                % (peak, peak - before, before, opts.flood_max_mib, secs)]
    return []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--h2spec", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--listener", choices=["both", "frontend", "agent"], default="both")
    ap.add_argument("--flood-only", action="store_true",
                    help="no conformance run: only http2/5.1.2/1 on the frontend for "
                         "--flood-seconds, with the memory bound")
    ap.add_argument("--flood-seconds", type=int, default=10,
                    help="--flood-only: run http2/5.1.2/1 on the frontend this long")
    ap.add_argument("--flood-max-mib", type=int, default=96,
                    help="bound on the growth of proxy-server's peak RSS during the flood")
    ap.add_argument("--keep", help="keep the logs and reports in this directory")
    opts = ap.parse_args()
    for tool in (opts.server, opts.h2spec):
        if not os.access(tool, os.X_OK):
            sys.exit("FAILED: %s is not built" % tool)
    if shutil.which("socat") is None:
        sys.exit("FAILED: socat is missing (scripts/setup.sh installs it)")

    all_cases, by_title = list_cases(opts.h2spec)
    names = titles(by_title)
    for cid in list(EXCLUDED) + list(EXPECTED):
        if cid not in all_cases:
            sys.exit("FAILED: %s is not an h2spec case" % cid)

    def cases_for(listener):
        return [c for c in all_cases
                if not (c in EXCLUDED and EXCLUDED[c][0] in ("both", listener))]

    work = opts.keep or tempfile.mkdtemp(prefix="konn-h2spec-")
    os.makedirs(work, exist_ok=True)
    certs = os.path.join(work, "certs")
    subprocess.run([os.path.join(opts.source_dir, "scripts/gen-certs.sh"), certs], check=True)
    problems = []
    procs = []
    try:
        for run in range(1, opts.runs + 1):
            sock = os.path.join(work, "r%d.sock" % run)
            agent_port, socat_port = free_port(), free_port()
            server_log = os.path.join(work, "server-%d.log" % run)
            server = subprocess.Popen(
                [opts.server, "--mode=grpc", "--uds-name=" + sock, "--server-port=0",
                 "--agent-port=%d" % agent_port, "--agent-bind-address=127.0.0.1",
                 "--cluster-cert=" + os.path.join(certs, "server.crt"),
                 "--cluster-key=" + os.path.join(certs, "server.key"),
                 "--health-port=0", "--admin-port=0"],
                stdout=subprocess.DEVNULL, stderr=open(server_log, "w"), env=server_env())
            procs.append(server)
            wait_for(lambda: tcp_accepts(agent_port) and os.path.exists(sock), 20,
                     "proxy-server", server, server_log)
            socat = subprocess.Popen(
                ["socat", "TCP-LISTEN:%d,bind=127.0.0.1,fork,reuseaddr" % socat_port,
                 "UNIX-CONNECT:" + sock], stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(work, "socat-%d.log" % run), "w"))
            procs.append(socat)
            wait_for(lambda: tcp_accepts(socat_port), 10, "socat", socat)
            targets = []
            if opts.flood_only:
                problems += flood(opts, socat_port, server, work)
            elif opts.listener in ("both", "frontend"):
                targets.append(("frontend", socat_port, False))
            if opts.listener in ("both", "agent") and not opts.flood_only:
                targets.append(("agent", agent_port, True))
            for listener, port, tls in targets:
                report = os.path.join(work, "%s-%d.xml" % (listener, run))
                log = os.path.join(work, "%s-%d.txt" % (listener, run))
                t0 = time.time()
                run_cases = cases_for(listener)
                run_h2spec(opts.h2spec, port, tls, run_cases, report, log)
                results = read_report(report, by_title)
                for cid, why in read_failure_texts(log).items():
                    if results.get(cid) not in (None, "skipped"):
                        results[cid] = why
                passed = sum(1 for v in results.values() if v is None)
                failed = sorted(c for c, v in results.items() if v not in (None, "skipped"))
                print("run %d %s: %d of %d passed in %.1fs; failed: %s" % (
                    run, listener, passed, len(run_cases), time.time() - t0,
                    " ".join(failed) or "none"), flush=True)
                problems += ["run %d %s" % (run, p) for p in check(listener, results, all_cases,
                                                                   names)]
                if server.poll() is not None:
                    problems.append("run %d: proxy-server exited (%s) during h2spec %s" % (
                        run, server.returncode, listener))
                    break
            for p in (socat, server):
                p.send_signal(signal.SIGTERM)
            for p in (socat, server):
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if not opts.keep:
            shutil.rmtree(work, ignore_errors=True)
    for cid, (where, why) in ({} if opts.flood_only else EXCLUDED).items():
        print("excluded (%s) %s: %s" % (where, cid, why))
    for cid, (where, what, why) in ({} if opts.flood_only else EXPECTED).items():
        print("expected to %s (%s) %s: %s" % (what, where, cid, why))
    if problems:
        print("\nFAILED:\n" + "\n".join(problems))
        return 1
    if opts.flood_only:
        print("h2spec flood: memory bounded")
    else:
        print("h2spec: every case passes but the expected failures and skips")
    return 0


if __name__ == "__main__":
    sys.exit(main())
